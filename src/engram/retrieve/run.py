"""Retrieval entry points over a `RetrievalContext`: hipporag2 (engram's default), hipporag2-paper, dense, bm25
and the variants; the reader."""

from __future__ import annotations

import numbers
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from engram.errors import InputError
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.context import RetrievalContext
from engram.retrieve.default import hipporag2_default, ranking_scores
from engram.retrieve.hipporag2 import hipporag2
from engram.retrieve.method_names import HYBRID, METHODS, RSE_METHODS, VARIANTS
from engram.retrieve.peers import PEERS
from engram.retrieve.query_ner import QueryEntities
from engram.retrieve.recognition import RecognitionFilter
from engram.retrieve.results import DENSE, HYBRID_SCORES, from_ranking, ranked_passages
from engram.retrieve.rse import RSEParams
from engram.retrieve.scoring import top_k as top_rows
from engram.retrieve.segments import DEFAULT_BUDGET_TOKENS, Segments, as_retrievals, check_request, segments_for
from engram.types import Answer, Fact, Retrieval

# a batch runs in slices of queries whose score rows (one float64 per fact and two per passage each: dense
# and BM25) fit in this many bytes, at least one query a slice: a large batch on a large memory holds no
# (queries, facts) matrix
SLICE_BYTES = 256 << 20


def retrieve(
    ctx: RetrievalContext,
    queries: list[str],
    k: int,
    method: str,
    *,
    query_entities: QueryEntities | None = None,
) -> list[Retrieval]:
    """`query_entities` (query text -> named entities) feeds hipporag1 and hipporag2-ner-to-node, which
    otherwise ask the LLM. A batch larger than `SLICE_BYTES` of score rows runs in slices: its memory stays
    bounded whatever the number of queries."""
    if method not in METHODS:
        raise InputError(f"unknown retrieval method {method!r}; choose one of {', '.join(METHODS)}")
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 1:  # numpy's integers are Integral
        raise InputError(f"top_k must be a whole number of at least 1, not {k!r}")
    k = int(k)
    index = ctx.view
    if not index.passage_alive.any():
        return [Retrieval(q, [], method) for q in queries]
    size = max(1, SLICE_BYTES // (8 * (len(index.fact_alive) + 2 * len(index.passage_alive))))
    if len(queries) > size:  # hipporag2's queries rank alone in any batch; hipporag1's power iteration stops
        # with its batch's slowest column (within its 1e-12 tolerance), as it did before
        sliced = (queries[start : start + size] for start in range(0, len(queries), size))
        return [r for part in sliced for r in retrieve(ctx, part, k, method, query_entities=query_entities)]
    if method in PEERS:  # structure-augmented peers with their own index (engram.retrieve.peers)
        from engram.retrieve import peers

        return peers.retrieve(ctx, method, queries, k)
    if method in RSE_METHODS:

        found = segments(ctx, queries, method.removeprefix("rse-"), DEFAULT_BUDGET_TOKENS)
        return as_retrievals(found, k, method)
    if method in VARIANTS:
        from engram.retrieve.variants import run_variant

        return run_variant(ctx, queries, k, method, query_entities)
    if method == "bm25":
        bm25 = ctx.bm25()
        out = []
        for q in queries:
            scores = bm25.scores(q)
            rows = top_rows(scores, k, index.passage_rank)
            found = ranked_passages(index, rows, scores[rows])
            out.append(Retrieval(q, found, "bm25", pending=index.pending, signals="BM25 over passage text"))
        return out
    vectors = ctx.embed_queries(queries)
    if method in ("dense", HYBRID):
        lexical = lexical_scores(ctx, queries) if method == HYBRID else None
        scores = ranking_scores(index.dense_scores(vectors), lexical, ctx.config, index.passage_alive)
        out = []
        for qi, q in enumerate(queries):
            rows = top_rows(index.rankable(scores[qi]), k, index.passage_rank)
            found = ranked_passages(index, rows, scores[qi][rows])
            named = HYBRID_SCORES if lexical is not None else DENSE
            out.append(Retrieval(q, found, method, pending=index.pending, signals=named))
        return out
    recognition = RecognitionFilter(ctx.chat) if ctx.chat is not None and ctx.config.use_filter else None
    named = DENSE
    if method == "hipporag2-paper":
        rankings = hipporag2(index, vectors, queries, ctx.config, k, recognition)
    else:
        lexical = lexical_scores(ctx, queries) if ctx.config.lexical_weight > 0 else None
        named = HYBRID_SCORES if lexical is not None else DENSE
        rankings = hipporag2_default(index, vectors, queries, ctx.config, k, recognition, lexical)
    results = [from_ranking(index, q, r, named) for q, r in zip(queries, rankings)]
    skipped = recognition.skipped if recognition is not None else {}
    return [replace(r, fallback_reason=skipped[r.query]) if r.query in skipped else r for r in results]


def lexical_scores(ctx: RetrievalContext, queries: list[str]) -> npt.NDArray[np.float64]:
    """The queries' BM25 scores, one row per query and one column per passage of the view."""
    bm25 = ctx.bm25()
    return np.vstack([bm25.scores(q) for q in queries]) if queries else np.zeros((0, len(ctx.view.passage_alive)))


def answer_all(ctx: RetrievalContext, queries: list[str], k: int, method: str) -> list[Answer]:
    from engram.errors import LLM_HINT, LLMError
    from engram.qa import read_all

    if ctx.chat is None:
        raise LLMError("answering needs an LLM: " + LLM_HINT)
    retrievals = retrieve(ctx, queries, k, method)
    readings = read_all(ctx.chat, [(r.query, r.passages) for r in retrievals])  # concurrently
    out = []
    for retrieval, (text, raw) in zip(retrievals, readings):
        facts: list[Fact] = list(retrieval.facts)
        out.append(Answer(retrieval.query, text, retrieval.passages, facts, raw))
    return out


def warm_view(view: GraphIndex) -> None:
    """Build what the default method derives per view (the query-to-phrase lookup), so that a writer that
    derives the next view pays for it instead of the first readers."""
    from engram.retrieve.links import lookup_for

    lookup_for(view)


def segments(
    ctx: RetrievalContext, queries: list[str], base: str, budget_tokens: int, params: RSEParams | None = None
) -> list[Segments]:
    """Relevant segment extraction over the ranking of `base` (engram.retrieve.segments)."""
    check_request(base, budget_tokens)
    params = params or RSEParams()
    return segments_for(ctx, retrieve(ctx, queries, params.candidates, base), base, budget_tokens, params)
