"""Turning rankings into results: passages of ranked rows, `Retrieval` from a graph ranking, and the
recognition filter bound to a context's chat model (shared by every graph method)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from engram.index.view.graph_index import GraphIndex
from engram.retrieve.context import RetrievalContext
from engram.retrieve.ranking import FALLBACKS, FilterFn, GraphRanking
from engram.types import Retrieval, RetrievedPassage, Seed, Triple


def ranked_passages(index: GraphIndex, rows: npt.NDArray[np.int64], scores: npt.ArrayLike) -> list[RetrievedPassage]:
    """Result passages for ranked rows; dead rows (deleted passages) are never returned."""
    out = []
    for row, score in zip(rows.tolist(), np.asarray(scores).tolist()):
        if not index.passage_alive[row]:
            continue
        p = index.passages[row]
        out.append(RetrievedPassage(p.id, p.doc_id, p.title, p.text, float(score), dict(p.metadata)))
    return out


def filter_fn(ctx: RetrievalContext) -> FilterFn | None:
    if ctx.chat is None or not ctx.config.use_filter:
        return None
    from engram.retrieve.recognition import recognition_filter

    llm = ctx.chat

    def run(query: str, candidates: Sequence[Triple]) -> list[int] | None:
        return recognition_filter(llm, query, candidates)

    return run


DENSE = "dense cosine"
HYBRID_SCORES = "dense cosine + BM25"


def from_ranking(index: GraphIndex, query: str, r: GraphRanking, scores: str = DENSE) -> Retrieval:
    """The result of a graph ranking; `scores` names the passage scores the method used (`DENSE`, or
    `HYBRID_SCORES` for dense + BM25), for the result's `signals` line."""
    reason = fallback_reason(index, r)
    return Retrieval(
        query=query,
        passages=ranked_passages(index, r.rows, r.scores),
        method=r.method,
        facts=r.kept,
        candidate_facts=r.candidates,
        seeds=[Seed(p, w) for p, w in r.seeds],
        filtered=r.filtered,
        pending=index.pending,
        fallback_reason=reason,
        signals=graph_signals(r, scores, reason),
    )


def graph_signals(r: GraphRanking, scores: str, reason: str) -> str:
    """One line on what ranked a graph method's passages: the seeds PageRank started from and the passage
    scores beside them, or the passage scores alone and why."""
    if reason:
        return f"{scores} only ({reason})"
    facts = f", {len(r.kept)} facts kept" if r.kept else ""
    return f"PageRank from {len(r.seeds)} seed phrases{facts}, with a {scores} passage prior"


def fallback_reason(index: GraphIndex, r: GraphRanking) -> str:
    """Why a graph method ranked by its passage scores alone ("" when it did not)."""
    if r.method not in FALLBACKS:
        return ""
    if not index.fact_alive.any():
        if index.pending:
            return f"no facts yet, {index.pending} passages pending extraction"
        return "the memory holds no facts (extraction found none)"
    if r.filtered and not r.kept:
        return "no fact survived the recognition filter"
    return "no fact or phrase of the graph matched the query"
