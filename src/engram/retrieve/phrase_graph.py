"""The phrase graph (HippoRAG 1): phrase nodes with relation and synonym edges, no passage nodes. Passages
are scored from the phrases' PageRank probabilities through the passage-phrase context matrix. Pure
functions over numpy/scipy arrays."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.graph.ppr import personalized_pagerank, walk_operator

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def phrase_operator(adjacency: sp.csr_matrix, phrase_rows: npt.ArrayLike) -> sp.csr_matrix:
    """The walk operator over the given phrase nodes (rows of the full adjacency, whose phrase nodes come
    first), in the given order: the phrase graph without passage nodes."""
    rows = np.asarray(phrase_rows, dtype=np.int64)
    block = sp.csr_matrix(adjacency)[rows][:, rows]
    return walk_operator(sp.csr_matrix(block))


def context_matrix(context: IntArray, n_passages: int, n_phrases: int) -> sp.csr_matrix:
    """(passages x phrases) 0/1 matrix: 1 where the passage's triples mention the phrase."""
    rows, cols = context[:, 0], context[:, 1]
    data = np.ones(len(rows), dtype=np.float64)
    return sp.csr_matrix((data, (rows, cols)), shape=(n_passages, n_phrases))


def link_nearest(
    entity_vectors: npt.ArrayLike,
    phrase_vectors: npt.ArrayLike,
    alive: npt.ArrayLike | None = None,
    tiebreak: npt.ArrayLike | None = None,
) -> tuple[IntArray, FloatArray]:
    """For each entity vector, the nearest phrase row by cosine (rows are L2-normalised) and its cosine.
    Only `alive` rows count; equal cosines go to the lower `tiebreak` value (default: the lower row)."""
    entities = np.asarray(entity_vectors, dtype=np.float32)
    phrases = np.asarray(phrase_vectors, dtype=np.float32)
    mask = np.ones(len(phrases), dtype=bool) if alive is None else np.asarray(alive, dtype=bool)
    if entities.size == 0 or phrases.size == 0 or not mask.any():
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    sims = np.where(mask[None, :], (entities @ phrases.T).astype(np.float64), -np.inf)
    order = np.arange(len(phrases)) if tiebreak is None else np.asarray(tiebreak)
    rows = np.array([_best(row, order) for row in sims], dtype=np.int64)
    return rows, sims[np.arange(len(rows)), rows]


def _best(scores: FloatArray, order: npt.NDArray[np.int64]) -> int:
    """The row of the highest score, equal ones going to the lowest `order` (no sort of every row)."""
    tied = np.flatnonzero(scores == scores.max())
    if not len(tied):  # a NaN score: the full sort's order, NaN last
        return int(np.lexsort((order, -scores))[0])
    return int(tied[np.argmin(order[tied])])


def specificity_seeds(
    rows: IntArray, passage_counts: npt.ArrayLike, link_scores: npt.ArrayLike | None = None
) -> tuple[IntArray, FloatArray]:
    """Seeds from linked phrase rows: each linked row weighs 1 / (number of passages containing the phrase)
    (node specificity), times its link score when `link_scores` is given; a row linked twice adds up.
    Returned sorted by row."""
    counts = np.maximum(np.asarray(passage_counts, dtype=np.float64), 1.0)
    scores = np.ones(len(rows)) if link_scores is None else np.asarray(link_scores, dtype=np.float64)
    totals: dict[int, float] = {}
    for row, score in zip(np.asarray(rows, dtype=np.int64).tolist(), scores.tolist()):
        totals[row] = totals.get(row, 0.0) + max(score, 0.0) / float(counts[row])
    seeds = np.array(sorted(totals), dtype=np.int64)
    return seeds, np.array([totals[r] for r in seeds.tolist()], dtype=np.float64)


def phrase_graph_passage_scores(
    operator: sp.csr_matrix, context: sp.csr_matrix, resets: npt.ArrayLike, damping: float = 0.5
) -> FloatArray:
    """Run PPR over the phrase graph for each reset column (phrases x queries) and score each passage by the
    summed probability of its phrases. Returns (passages x queries)."""
    probabilities = personalized_pagerank(operator, resets, damping)
    if probabilities.ndim == 1:
        probabilities = probabilities[:, None]
    return np.asarray(context @ probabilities, dtype=np.float64)


def rank_with_tiebreak(
    primary: npt.ArrayLike, secondary: npt.ArrayLike, k: int, tiebreak: npt.ArrayLike | None = None
) -> IntArray:
    """Rows of the k highest `primary` scores; equal primary scores are ordered by `secondary` (higher
    first), then by the lower `tiebreak` value (default: the row). Rows scored -inf are never returned."""
    first = np.asarray(primary, dtype=np.float64)
    second = np.asarray(secondary, dtype=np.float64)
    last = np.arange(first.size) if tiebreak is None else np.asarray(tiebreak)
    order = np.lexsort((last, -second, -first))
    order = order[~np.isneginf(first[order])]
    return order[: max(k, 0)].astype(np.int64)
