"""When an unfinished Personalized PageRank solve already fixes the top of the ranking: pure functions.

`solve_pagerank` solves the symmetric system (I - damping S) y = b by conjugate gradients, S = D^-1/2 A D^-1/2
(eigenvalues in [-1, 1]), so the matrix's smallest eigenvalue is at least 1 - damping and the error of any
iterate is bounded by its residual: ||y - y*||_2 <= ||b - (I - damping S) y||_2 / (1 - damping). Node by node
it is tighter: the error e = y* - y solves (I - damping S) e = r (the residual), so e(v) = r(v) + damping (S e)(v),
and by Cauchy-Schwarz |e(v)| <= |r(v)| + damping ||S's row v||_2 ||e||_2 (`node_bounds`), never more than the
2-norm bound (a row of S has 2-norm at most 1) and several times less on engram's graphs, whose rows have norms
well below 1: a ranking settles one sparse product sooner (bench/README.md, "Node-wise error bounds"). The
PageRank mass of node v is proportional to x(v) = sqrt(degree(v)) y(v) (a dangling node's is its reset weight,
exact), so x(v) is known to within sqrt(degree(v)) times that bound.

The masses are x / sum(x), and sum(x) is known exactly without solving: the columns of the walk M = A D^-1 sum
to 1 except a dangling node's, so summing (I - damping M) x = reset (normalised) gives
(1 - damping) sum(x) + damping sum(x over dangling nodes) = 1, and a dangling node's x is its reset weight.
Dividing by that total, a mass is known within sqrt(degree(v)) x bound / total.

A ranking of the nodes from `start` on (the passage nodes, last in canonical order) is *settled* at k when
the k best are separated by their bounds: each one's lowest possible value is above the next one's highest,
and the k-th's is above the highest of every node outside the k. Then no later iterate, nor the exact
solution, can rank them otherwise: the top k in order are those of the exact solution. The solve stops once
that holds and the k masses (x(v) / sum(x)) are also known within `SCORE_TOLERANCE` of themselves, so the
scores it returns are the exact masses to 0.1 %. Values that tie (or come closer than the solver's
tolerance) never separate, so such a solve runs to its tolerance as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
DanglingNodes = npt.NDArray[np.bool_] | npt.NDArray[np.int64]  # a mask over every node, or their rows in order

# How far the conjugate-gradient residual, updated by recurrence, may be taken to drift from the true
# residual b - (I - damping S) y, relative to ||b||: rounding adds a few unit roundoffs per iteration at a
# condition number of at most 3, orders of magnitude below this.
DRIFT = 1e-12


# How close to the exact PageRank mass each of the top k masses must be known, relative to it, before the
# solve stops: the order of the top k is exact once settled, and their scores are then within 0.1 % too.
SCORE_TOLERANCE = 1e-3


@dataclass(frozen=True)
class TopK:
    """Stop a PageRank solve once the `k` best of the nodes from `start` on are settled, in order, and each of
    their masses is known within `rel` of itself."""

    start: int
    k: int
    rel: float = SCORE_TOLERANCE


def error_bound(residual_norm: FloatArray, rhs_norm: FloatArray, damping: float) -> FloatArray:
    """Per column, the most ||y - y*||_2 can be for a conjugate-gradient iterate with this (recurrence)
    residual norm, for a right-hand side of norm `rhs_norm`."""
    bound: FloatArray = (residual_norm + DRIFT * rhs_norm) / (1.0 - damping)
    return bound


def node_bounds(
    residual: FloatArray, row_norms: FloatArray, residual_norm: FloatArray, rhs_norm: FloatArray, damping: float
) -> FloatArray:
    """Per node and column ((m, q)), the most |y(v) - y*(v)| can be for an iterate whose (recurrence) residual
    has these entries `residual` ((m,) or (m, q): the nodes' rows) and 2-norm `residual_norm` (per column), for a
    right-hand side of norm `rhs_norm`; `row_norms` are the 2-norms of the nodes' rows of S. The residual's
    drift from the true one (at most `DRIFT` x ||b|| in 2-norm) bounds each entry's drift too."""
    drift = DRIFT * np.atleast_1d(rhs_norm)
    spread = damping * error_bound(np.atleast_1d(residual_norm), np.atleast_1d(rhs_norm), damping)
    r = residual if residual.ndim == 2 else residual[:, None]
    bound: FloatArray = np.abs(r) + drift + row_norms[:, None] * spread
    return bound


def exact_total(reset: FloatArray, dangling: DanglingNodes, damping: float) -> FloatArray:
    """sum(x) of the exact solution of (I - damping M) x = reset, per column of the normalised `reset`; `dangling`
    marks the dangling nodes (a mask) or lists their rows in order (the same sum, read without a pass over every
    node)."""
    rs = reset if reset.ndim == 2 else reset[:, None]
    total: FloatArray = (1.0 - damping * rs[dangling].sum(axis=0)) / (1.0 - damping)
    return total if reset.ndim == 2 else total[:1]


def settled(values: FloatArray, slack: FloatArray, k: int, rel: float = np.inf) -> bool:
    """Whether the `k` largest of `values` are certain, in order, when each true value lies within `slack` of
    its value (a nonnegative array of the same length): every one of them is above the next by more than both
    slacks, and the k-th above every other value by more than both; and each one's slack is at most `rel` of
    the lowest value it may truly have (so its value is within `rel` of the true one)."""
    n = len(values)
    if n == 0 or k <= 0:
        return True
    k = min(k, n)
    if rel < np.inf and n > 1:  # the largest value first: an early iterate usually fails here, before the sort
        best = int(np.argmax(values))  # in every top k, or tied with another (which never settles for n > 1)
        if not bool(slack[best] <= rel * (values[best] - slack[best])):
            return False
    top = np.argpartition(-values, k - 1)[:k] if k < n else np.arange(n)
    top = top[np.argsort(-values[top], kind="stable")]
    low = values[top] - slack[top]
    high = values[top] + slack[top]
    if rel < np.inf and not bool(np.all(slack[top] <= rel * low)):
        return False
    if k > 1 and not bool(np.all(low[:-1] > high[1:])):
        return False
    if k == n:
        return True
    rest = values + slack
    rest[top] = -np.inf
    return bool(low[-1] > rest.max())


def shortfall(values: FloatArray, slack: FloatArray, k: int, rel: float = np.inf) -> float:
    """The factor by which every slack must still shrink, the values held fixed, for `settled` to hold: below 1
    when it holds already, inf when no shrinking can do it (a tie at the top)."""
    n = len(values)
    if n == 0 or k <= 0:
        return 0.0
    k = min(k, n)
    top = np.argpartition(-values, k - 1)[:k] if k < n else np.arange(n)
    top = top[np.argsort(-values[top], kind="stable")]
    v, s = values[top], slack[top]
    need = [_ratio(s * (1.0 + rel), rel * v)] if rel < np.inf else []
    if k > 1:
        need.append(_ratio(s[:-1] + s[1:], v[:-1] - v[1:]))
    if k < n:
        rest = np.ones(n, dtype=bool)
        rest[top] = False
        need.append(_ratio(s[-1] + slack[rest], v[-1] - values[rest]))
    return max(need, default=0.0)


def _ratio(width: FloatArray, gap: FloatArray) -> float:
    """The largest width / gap, inf where a gap is not positive."""
    if np.any(gap <= 0):
        return float(np.inf)
    return float(np.max(width / gap))


def ranking_settled(
    y: FloatArray, root: FloatArray, reset: FloatArray, dangling: npt.NDArray[np.bool_], bound: FloatArray, top: TopK
) -> bool:
    """Whether every column of the iterate `y` ((n,) or (n, q)) settles the top `top.k` of the nodes from
    `top.start` on, each of their x(v) within `top.rel` of the exact one. `bound` ((m, q), from `node_bounds`)
    bounds the error of each y(v) of the m nodes from `top.start` on. `reset` is the normalised reset (a dangling
    node's x is its reset weight, known exactly)."""
    ys, rs = (y, reset) if y.ndim == 2 else (y[:, None], reset[:, None])
    roots = root[top.start :]
    still = dangling[top.start :]
    for column in range(ys.shape[1]):
        values = ys[top.start :, column] * roots
        values[still] = rs[top.start :, column][still]
        if not settled(values, roots * bound[:, column], top.k, top.rel):
            return False
    return True


def top_unsettled(
    values: FloatArray,
    roots: FloatArray,
    residual: FloatArray,
    row_norms: FloatArray,
    residual_norm: float,
    rhs_norm: float,
    damping: float,
    rel: float,
    k: int,
) -> bool:
    """Whether `settled` would refuse a vector iterate at the `rel` condition of its `k` largest values, without
    ranking them: the largest value first (one node, as most early iterates fail there), then every node that
    fails the condition and whether the largest of those is among the k largest (fewer than k values above it).
    `values` are the x(v) of the nodes from a ranking's start on (a dangling node's its exact reset weight),
    `roots` their sqrt(degree) (0 when dangling), `residual` and `row_norms` the residual's entries and the rows'
    2-norms there. The arithmetic of `node_bounds` and `settled` (a few passes over these nodes, no partition),
    so a refusal here is one of theirs (for more than one node and a finite `rel`); when values tie at the k-th
    place, which of them count as the k largest may differ from `settled`'s choice, but such a tie never
    settles there either."""
    n = len(values)
    if n < 2 or not rel < np.inf or k <= 0:
        return False
    spread = damping * ((residual_norm + DRIFT * rhs_norm) / (1.0 - damping))  # `error_bound`'s, in scalars
    best = int(np.argmax(values))
    slack_best = float(roots[best]) * (abs(float(residual[best])) + DRIFT * rhs_norm + float(row_norms[best]) * spread)
    if not slack_best <= rel * (float(values[best]) - slack_best):
        return True
    slack = np.abs(residual)
    slack += DRIFT * rhs_norm
    slack += row_norms * spread
    slack *= roots
    failing = slack > rel * (values - slack)
    if not failing.any():
        return False
    worst = float(values[failing].max())  # the largest value that fails: is it one of the k largest?
    return int(np.count_nonzero(values > worst)) < k
