"""Seed weighting and ranking for HippoRAG 2: pure functions over numpy arrays."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.special import gammaincc, gammaln, log_ndtr

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


def significance_scores(dense: npt.ArrayLike, lexical: npt.ArrayLike, alive: npt.ArrayLike | None = None) -> FloatArray:
    """Dense cosines and BM25 scores fused as evidence, in nats, for ranking by passage scores alone: each
    score's tail probability under a null fitted to the query's own scores over the `alive` passages (cosine:
    a normal; BM25: the share of passages that match any query word times a gamma fitted by moments to the
    matching scores), turned into how unlikely it is that the best of the n passages would reach it by chance
    (`best_of_n_surprisal`), and the two summed (Fisher's method). So no weight: a signal weighs as much as
    its scores stand out for that query and corpus, and one that does not single any passage out (cosines of
    release notes that all read alike) gives way to the other. Rows are queries (one row: a 1-d array); dead
    rows get -inf; a non-finite or non-positive BM25 score counts as no match. Why: docs/method.md."""
    cos = np.asarray(dense, dtype=np.float64)
    lex = np.asarray(lexical, dtype=np.float64)
    if cos.shape != lex.shape:
        raise ValueError(f"dense scores {cos.shape} and lexical scores {lex.shape} differ in shape")
    cos2, lex2 = np.atleast_2d(cos), np.atleast_2d(lex)
    live = np.ones(cos2.shape[1], dtype=bool) if alive is None else np.asarray(alive, dtype=bool)
    n = int(live.sum())
    out = np.full(cos2.shape, -np.inf)
    if n and cos2.size:
        evidence = best_of_n_surprisal(_normal_log_tail(cos2[:, live]), n)
        evidence += best_of_n_surprisal(_match_log_tail(lex2[:, live]), n)
        out[:, live] = evidence
    result: FloatArray = out.reshape(cos.shape)
    return result


def best_of_n_surprisal(log_tail: npt.ArrayLike, n: int) -> FloatArray:
    """-log P(the best of `n` independent null scores reaches this one) = -log(1 - (1 - p)^n), from log p:
    about -log(n p) for a score no null passage is likely to reach, falling to 0 for one that many would
    (Sidak's correction for the n passages a query is compared with). p = 1 (no evidence) gives 0."""
    lp = np.minimum(np.asarray(log_tail, dtype=np.float64), 0.0)
    out = np.zeros_like(lp)
    log_n = math.log(n)
    rare = lp + log_n < -20.0  # n p < 2e-9: -log(1 - (1 - p)^n) is -log(n p) to within n p
    out[rare] = -(lp[rare] + log_n)
    # p = 1 is no evidence, and n p >= 800 leaves (1 - p)^n <= e^-800, which is 0 in float64: both stay 0
    rest = ~rare & (lp < 0.0) & (lp + log_n < math.log(800.0))
    t = n * np.log1p(-np.exp(lp[rest]))  # log((1 - p)^n), in (-inf, 0)
    near = t > -math.log(2.0)
    t[near] = np.log(-np.expm1(t[near]))
    t[~near] = np.log1p(-np.exp(t[~near]))  # log(1 - e^t), accurate on both sides (Maechler 2012)
    out[rest] = -t
    return out


def _normal_log_tail(scores: FloatArray) -> FloatArray:
    """log P(X >= score) per row, X normal with the row's mean and deviation (rows of equal scores: 0)."""
    ordered = np.sort(scores, axis=1)  # sums in value order: the same passages in any row order give equal bits
    mean = ordered.mean(axis=1, keepdims=True)
    spread = ordered.std(axis=1, keepdims=True)
    z = np.divide(scores - mean, spread, out=np.zeros_like(scores), where=spread > 1e-12)
    out: FloatArray = np.where(spread > 1e-12, log_ndtr(-z), 0.0)
    return out


def _match_log_tail(scores: FloatArray) -> FloatArray:
    """log P(S >= score) per row for BM25 scores: the share of passages matching any query word times a gamma
    tail fitted by moments to the row's matching (positive) scores; non-matching passages: 0 (p = 1). A row
    with one match, or matches all alike, gives every match just the share."""
    out = np.zeros_like(scores)
    for row, values in zip(out, scores):
        matched = np.flatnonzero(np.isfinite(values) & (values > 0))
        if not len(matched):
            continue
        x = values[matched]
        row[matched] = math.log(len(matched) / len(values))
        ordered = np.sort(x)  # as above: independent of the passages' row order
        mean, var = float(ordered.mean()), float(ordered.var())
        if len(matched) > 1 and var > 1e-12 * mean * mean:
            row[matched] += _gamma_log_sf(x * (mean / var), mean * mean / var)  # shape mean^2/var, scale var/mean
    return out


def _gamma_log_sf(x: FloatArray, shape: float) -> FloatArray:
    """log of the regularised upper incomplete gamma Q(shape, x); where Q underflows (x in the hundreds),
    its leading asymptotic terms (shape - 1) log x - x - log Gamma(shape) + log(1 + (shape - 1) / x)."""
    q = gammaincc(shape, x)
    out: FloatArray = np.empty_like(x)
    exact = q > 1e-300
    out[exact] = np.log(q[exact])
    far = x[~exact]
    out[~exact] = (shape - 1.0) * np.log(far) - far - gammaln(shape) + np.log1p((shape - 1.0) / far)
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
