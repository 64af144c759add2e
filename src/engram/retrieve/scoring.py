"""Seed weighting and ranking for HippoRAG 2: pure functions over numpy arrays."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BLOCK = 1024  # rows per block whose maximum bounds a large array's k-th largest score from below (`top_k`)
BLOCKED_FROM = 1 << 16  # arrays from this size look for their k-th largest score through block maxima


def min_max(scores: npt.ArrayLike) -> FloatArray:
    """Scale to [0, 1]; a constant vector becomes all ones (every item equally relevant)."""
    x = np.asarray(scores, dtype=np.float64)
    if x.size == 0:
        return x
    low, high = float(x.min()), float(x.max())
    if high - low <= 1e-12:
        return np.ones_like(x)
    return (x - low) / (high - low)


def gap_weights(scores: npt.ArrayLike, temperature: float, best: float | None = None) -> FloatArray:
    """exp((score - best) / temperature): 1 for the best score (default: the highest finite one), falling off
    with the gap below it; non-finite scores (dead rows) get 0."""
    x = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(x)
    out = np.zeros_like(x)
    if finite.any():
        top = float(x[finite].max()) if best is None else best
        out[finite] = np.exp((x[finite] - top) / max(temperature, 1e-6))
    return out


def hybrid_scores(dense: npt.ArrayLike, lexical: npt.ArrayLike, weight: float) -> FloatArray:
    """Dense cosines plus `weight` x each query's lexical (BM25) scores over its best one: the passage that
    matches the query's words best gains `weight` on the cosine scale, one that shares none of them gains
    nothing. Rows are queries (one row: a 1-d array). A query whose words match nowhere (only stopwords)
    keeps its cosines; non-finite cosines (dead rows) stay as they are, and a non-finite lexical score counts
    as no match."""
    cos = np.asarray(dense, dtype=np.float64)
    lex = np.asarray(lexical, dtype=np.float64)
    if cos.shape != lex.shape:
        raise ValueError(f"dense scores {cos.shape} and lexical scores {lex.shape} differ in shape")
    if weight == 0 or cos.size == 0:
        return np.array(cos, dtype=np.float64)
    lex2 = np.atleast_2d(np.where(np.isfinite(lex), np.maximum(lex, 0.0), 0.0))
    best = lex2.max(axis=1, keepdims=True)
    scaled = np.divide(lex2, best, out=np.zeros_like(lex2), where=best > 0)
    out: FloatArray = cos + weight * scaled.reshape(cos.shape)
    return out


def top_k(scores: npt.ArrayLike, k: int, tiebreak: npt.ArrayLike | None = None) -> IntArray:
    """Indices of the k highest scores, best first. Ties go to the lower `tiebreak` value (default: the lower
    index), so rankings are deterministic. Entries of -inf (dead rows) are never returned."""
    x = np.asarray(scores, dtype=np.float64)
    k = min(k, x.size)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    candidates = _at_least_kth(x, k)
    values = x[candidates]
    secondary = candidates if tiebreak is None else np.asarray(tiebreak)[candidates]
    order = np.lexsort((secondary, -values))
    return candidates[order][:k].astype(np.int64)


def _at_least_kth(x: FloatArray, k: int) -> IntArray:
    """The rows whose score is at least the k-th largest (every row above -inf when that is -inf). On a large
    array the k-th largest block maximum bounds it from below (k blocks reach it), so one pass over the block
    maxima and one comparison pass leave a few rows, among which the k-th largest is the array's."""
    rows: IntArray | None = None
    if x.size >= BLOCKED_FROM and k * BLOCK < x.size:
        whole = x.size - x.size % BLOCK
        maxima = x[:whole].reshape(-1, BLOCK).max(axis=1)
        if whole < x.size:
            maxima = np.append(maxima, x[whole:].max())
        if not np.isnan(maxima).any():
            bound = -np.partition(-maxima, k - 1)[k - 1]
            rows = np.flatnonzero(x >= bound) if bound > -np.inf else np.flatnonzero(x > -np.inf)
    sub = x if rows is None else x[rows]
    if not sub.size:
        return np.zeros(0, dtype=np.int64)
    # the k-th largest over every row: the k-th largest finite score, or -inf when fewer than k are finite
    threshold = -np.partition(-sub, k - 1)[k - 1] if k < sub.size else sub.min()  # (a small kth: fast on many ties)
    picked = np.flatnonzero(sub >= threshold) if threshold > -np.inf else np.flatnonzero(sub > -np.inf)
    out: IntArray = picked if rows is None else rows[picked]
    return out


def phrase_seeds(
    kept_facts: IntArray,
    fact_scores: npt.ArrayLike,
    fact_phrases: IntArray,
    max_seeds: int = 5,
    passage_counts: npt.ArrayLike | None = None,
    tiebreak: npt.ArrayLike | None = None,
) -> tuple[IntArray, FloatArray]:
    """Phrase seeds from the kept facts: each subject/object phrase is weighted by the mean score of the kept
    facts it appears in; with `passage_counts` (node specificity) that weight is divided by the number of
    passages the phrase occurs in. The `max_seeds` highest-weighted phrases are returned, best first (ties by
    `tiebreak[phrase]`, default the phrase index)."""
    scores = np.asarray(fact_scores, dtype=np.float64)
    totals: dict[int, float] = {}
    counts: dict[int, int] = {}
    for fact in np.asarray(kept_facts, dtype=np.int64).tolist():
        for phrase in fact_phrases[fact].tolist():
            totals[phrase] = totals.get(phrase, 0.0) + float(scores[fact])
            counts[phrase] = counts.get(phrase, 0) + 1
    if not totals:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    phrases = np.array(sorted(totals), dtype=np.int64)
    weights = np.array([totals[p] / counts[p] for p in phrases.tolist()], dtype=np.float64)
    if passage_counts is not None:
        occurrences = np.asarray(passage_counts, dtype=np.float64)[phrases]
        weights = weights / np.maximum(occurrences, 1.0)
    best = top_k(weights, max_seeds, None if tiebreak is None else np.asarray(tiebreak)[phrases])
    return phrases[best], weights[best]


def reset_vector(
    n_phrases: int,
    seed_phrases: IntArray,
    seed_weights: FloatArray,
    passage_scores: npt.ArrayLike,
    passage_weight: float = 0.05,
) -> FloatArray:
    """PPR reset weights over phrase nodes then passage nodes: the phrase seeds' weights, and every passage
    `passage_weight` x its min-max normalised dense similarity."""
    passages = min_max(passage_scores) * passage_weight
    reset = np.zeros(n_phrases + passages.size, dtype=np.float64)
    reset[seed_phrases] = seed_weights
    reset[n_phrases:] = passages
    return reset
