"""What every graph method shares: the ranking it returns, the dense fallback, picking a query's facts (with
the recognition filter), and the Personalized PageRank step over the full graph."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram.config import RetrieveConfig
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.method_names import HYBRID
from engram.retrieve.scoring import top_k
from engram.types import Fact, Triple

# what a graph method's ranking says when it ranked by its passage scores alone: dense cosines, or the hybrid
# dense + BM25 scores (engram.retrieve.scoring.hybrid_scores; also the `hybrid` method's name)
DENSE_FALLBACK = "dense"
FALLBACKS = (DENSE_FALLBACK, HYBRID)

FloatArray = npt.NDArray[np.float64]
# (query, candidate triples) -> indices of the kept candidates, or None when the filter is unavailable
FilterFn = Callable[[str, Sequence[Triple]], "list[int] | None"]
# a query's candidate facts, the kept ones, and whether the recognition filter ran
Evidence = tuple[list[Fact], list[Fact], bool]


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


@dataclass(frozen=True)
class SeedReset:
    """One query's PageRank reset by its parts: phrase seeds (distinct phrase rows and their weights) and every
    passage row's weight; `dense` writes it out as a vector over every row."""

    phrase_rows: npt.NDArray[np.int64]
    phrase_weights: FloatArray
    passages: FloatArray

    def dense(self, n_phrases: int) -> FloatArray:
        """The reset over every row: phrase rows, then passage rows."""
        reset = np.zeros(n_phrases + len(self.passages), dtype=np.float64)
        reset[self.phrase_rows] = self.phrase_weights
        reset[n_phrases:] = self.passages
        return reset


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
    rows = _alive_top(index, scores, top or config.fact_top_k).tolist()
    candidates = _facts(index, rows, scores)
    kept_rows, filtered = rows, False
    if recognition is not None and config.use_filter and rows:
        choice = recognition(query, [index.tables.facts[i] for i in rows])
        if choice is not None:
            kept_rows, filtered = [rows[i] for i in choice], True
    kept = _facts(index, kept_rows, scores) if filtered else list(candidates)  # unfiltered: the same facts
    return candidates, kept, kept_rows, filtered


def _alive_top(index: GraphIndex, scores: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.int64]:
    """The `k` best alive facts by score (ties by canonical order). The best of every row when none of them is
    dead (the dead rows set to -inf could only fall below them): no masked copy of every score."""
    rows = top_k(scores, k, index.fact_rank)
    if index.fact_alive[rows].all():
        return rows
    return top_k(np.where(index.fact_alive, scores, -np.inf), k, index.fact_rank)


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


def rank_full_graph(
    index: GraphIndex,
    resets: Sequence[FloatArray | SeedReset | None],
    passage_scores: FloatArray,
    seeds: Sequence[list[tuple[str, float]]],
    evidence: Sequence[Evidence],
    damping: float,
    k: int,
    method: str,
    fallback: str = "dense",
) -> list[GraphRanking]:
    """Personalized PageRank over phrase and passage nodes for each query with a reset vector (phrase seeds,
    then every passage's prior); passages ranked by their PageRank mass. A query without a reset vector is
    ranked by its `passage_scores` (its method then `fallback`: "dense", or "hybrid" for dense + BM25
    scores). The walk stops once each query's `k` best passages are certain
    (`GraphIndex.ppr`): the ranking is the exact solution's, the masses within a certified bound.

    Each query is solved on its own, as a vector, in a batch too: it stops at its own settled iterate, where a
    block of columns runs until the slowest settles, and every pass over a block's (nodes, queries) arrays
    costs more than the matrix reads it shares (bench/bench_batch.py: each query alone took 0.65-0.74x the
    block's time on 1,930 MuSiQue passages, 0.19-0.21x on 100,000 synthetic ones). A query's result is
    therefore the same, to the bit, alone or in a batch."""
    out: list[GraphRanking] = []
    for qi, reset in enumerate(resets):
        candidates, kept, filtered = evidence[qi]
        if reset is None:
            rows, scores = dense_ranking(index.rankable(passage_scores[qi]), k, index.passage_rank)
            out.append(GraphRanking(rows, scores, fallback, candidates, kept, [], filtered))
            continue
        mass = index.rankable(_passage_masses(index, reset, damping, k))
        rows = top_k(mass, k, index.passage_rank)
        out.append(GraphRanking(rows, mass[rows], method, candidates, kept, list(seeds[qi]), filtered))
    return out


def _passage_masses(index: GraphIndex, reset: FloatArray | SeedReset, damping: float, k: int) -> FloatArray:
    """One query's PageRank masses at the passage rows; a reset by its parts builds no vector over every row."""
    if isinstance(reset, SeedReset):
        return index.seeded_ppr(reset.phrase_rows, reset.phrase_weights, reset.passages, damping, k)
    return index.passage_ppr(reset, damping, top=k)
