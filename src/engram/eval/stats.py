"""Paired bootstrap significance test between two methods scored on the same questions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bootstrap:
    """`delta`: mean(a) - mean(b) on the questions as given. `ci_low`/`ci_high`: the 2.5th and 97.5th
    percentiles of the resampled deltas. `p_value`: two-sided, the share of resampled deltas at least as far
    from the observed delta as the observed delta is from zero (the resampled distribution shifted to the
    null hypothesis of no difference). `p_greater`: one-sided, for "a is better than b"."""

    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    p_greater: float
    samples: int
    n: int


def paired_bootstrap(a: Sequence[float], b: Sequence[float], samples: int = 10_000, seed: int = 0) -> Bootstrap:
    """Resample questions with replacement `samples` times (fixed `seed`: the same inputs always give the
    same p-value) and compare the per-question differences `a - b`."""
    if len(a) != len(b):
        raise ValueError("paired bootstrap needs one score per question from each method")
    if samples < 1:
        raise ValueError("samples must be at least 1")
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = len(diffs)
    if n == 0:
        return Bootstrap(0.0, 0.0, 0.0, 1.0, 1.0, samples, 0)
    observed = float(diffs.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(samples, dtype=np.float64)
    for start in range(0, samples, 1000):
        stop = min(start + 1000, samples)
        picks = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diffs[picks].mean(axis=1)
    shifted = means - observed
    eps = 1e-12
    p_two = float(np.mean(np.abs(shifted) >= abs(observed) - eps)) if observed != 0.0 else 1.0
    p_one = float(np.mean(shifted >= observed - eps)) if observed > 0.0 else 1.0
    low, high = np.percentile(means, [2.5, 97.5])
    return Bootstrap(observed, float(low), float(high), p_two, p_one, samples, n)
