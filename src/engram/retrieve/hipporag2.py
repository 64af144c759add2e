"""HippoRAG 2 retrieval as the paper describes it (`method="hipporag2-paper"`): query-to-fact scoring,
recognition filter, seed weighting, Personalized PageRank. engram's default (`hipporag2`) is in
`engram.retrieve.default`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram.config import RetrieveConfig
from engram.index.view import GraphIndex
from engram.retrieve.scoring import min_max, phrase_seeds, reset_vector, top_k
from engram.types import Fact, Triple

# (query, candidate triples) -> indices of the kept candidates, or None when the filter is unavailable
FilterFn = Callable[[str, Sequence[Triple]], "list[int] | None"]
PAPER = "hipporag2-paper"


@dataclass(frozen=True)
class GraphRanking:
    """One query's outcome: passage rows and scores, best first, and the evidence."""

    rows: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    method: str
    candidates: list[Fact]
    kept: list[Fact]
    seeds: list[tuple[str, float]]
    filtered: bool


def dense_ranking(
    passage_scores: npt.NDArray[np.float64], k: int, tiebreak: npt.ArrayLike | None = None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    rows = top_k(passage_scores, k, tiebreak)
    return rows, passage_scores[rows]


def _facts(index: GraphIndex, rows: Sequence[int], scores: npt.NDArray[np.float64]) -> list[Fact]:
    return [Fact(*index.tables.facts[i], score=float(scores[i])) for i in rows]


def kept_facts(
    index: GraphIndex,
    query: str,
    scores: npt.NDArray[np.float64],
    config: RetrieveConfig,
    recognition: FilterFn | None,
    top: int | None = None,
) -> tuple[list[Fact], list[Fact], list[int], bool]:
    """The query's `top` (default `fact_top_k`) facts by score, the ones the recognition filter keeps (all
    without a filter), the kept rows, and whether the filter ran."""
    rows = top_k(np.where(index.fact_alive, scores, -np.inf), top or config.fact_top_k, index.fact_rank).tolist()
    candidates = _facts(index, rows, scores)
    kept_rows, filtered = rows, False
    if recognition is not None and config.use_filter and rows:
        choice = recognition(query, [index.tables.facts[i] for i in rows])
        if choice is not None:
            kept_rows, filtered = [rows[i] for i in choice], True
    return candidates, _facts(index, kept_rows, scores), kept_rows, filtered


def kept_facts_all(
    index: GraphIndex,
    queries: Sequence[str],
    scores: npt.NDArray[np.float64],
    config: RetrieveConfig,
    recognition: FilterFn | None,
    top: int | None = None,
) -> list[tuple[list[Fact], list[Fact], list[int], bool]]:
    """`kept_facts` for every query; a filter with a `many` method (`RecognitionFilter`) gets the whole
    batch at once, so its LLM calls run concurrently."""
    many = getattr(recognition, "many", None)
    if recognition is None or not config.use_filter or not callable(many):
        return [kept_facts(index, q, scores[qi], config, recognition, top) for qi, q in enumerate(queries)]
    unfiltered = [kept_facts(index, q, scores[qi], config, None, top) for qi, q in enumerate(queries)]
    asked = [qi for qi, (_, _, rows, _) in enumerate(unfiltered) if rows]
    choices = many([(queries[qi], [index.tables.facts[i] for i in unfiltered[qi][2]]) for qi in asked])
    out = list(unfiltered)
    for qi, choice in zip(asked, choices):
        if choice is not None:
            candidates, _, rows, _ = unfiltered[qi]
            kept_rows = [rows[i] for i in choice]
            out[qi] = (candidates, _facts(index, kept_rows, scores[qi]), kept_rows, True)
    return out


def hipporag2(
    index: GraphIndex,
    query_vectors: npt.NDArray[np.float32],
    queries: Sequence[str],
    config: RetrieveConfig,
    k: int,
    recognition: FilterFn | None = None,
    method: str = PAPER,
) -> list[GraphRanking]:
    """The paper's method (`hipporag2-paper`). Queries whose filter keeps no fact fall back to dense
    ranking; the others run one batched Personalized PageRank."""
    passage_scores = index.dense_scores(query_vectors)
    fact_scores = index.fact_scores(query_vectors)
    results: list[GraphRanking | None] = []
    resets: list[npt.NDArray[np.float64]] = []
    pending_graph: list[tuple[int, list[Fact], list[Fact], list[tuple[str, float]], bool]] = []
    picked = kept_facts_all(index, queries, fact_scores, config, recognition)
    for qi in range(len(queries)):
        candidates, kept, kept_rows, filtered = picked[qi]
        if not kept_rows:
            rows, scores = dense_ranking(index.rankable(passage_scores[qi]), k, index.passage_rank)
            results.append(GraphRanking(rows, scores, "dense", candidates, [], [], filtered))
            continue
        counts = index.phrase_passage_counts if config.node_specificity else None
        seed_rows, seed_weights = phrase_seeds(
            np.array(kept_rows, dtype=np.int64),
            min_max(fact_scores[qi]),
            index.tables.fact_phrases,
            config.max_seeds,
            counts,
            index.phrase_rank,
        )
        resets.append(reset_vector(index.n_phrases, seed_rows, seed_weights, passage_scores[qi], config.passage_weight))
        seeds = [(index.tables.phrases[r], float(w)) for r, w in zip(seed_rows.tolist(), seed_weights)]
        pending_graph.append((qi, candidates, kept, seeds, filtered))
        results.append(None)
    if resets:
        ranks = index.ppr(np.stack(resets, axis=1), config.damping)
        for col, (qi, candidates, kept, seeds, filtered) in enumerate(pending_graph):
            passage_mass = index.rankable(ranks[index.n_phrases :, col])
            rows = top_k(passage_mass, k, index.passage_rank)
            results[qi] = GraphRanking(rows, passage_mass[rows], method, candidates, kept, seeds, filtered)
    return [r for r in results if r is not None]
