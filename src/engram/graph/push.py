"""The top of a Personalized PageRank ranking from the neighbourhood of the reset's mass: a certified forward
push (pure functions over arrays).

Notation of `engram.graph.certify`: x solves (I - d M) x = r with M = A D^-1 the walk, d the damping and r the
normalised reset; y = D^-1/2 x solves (I - d S) y = b = D^-1/2 r. A forward push (Andersen, Chung and Lang,
"Local graph partitioning using PageRank vectors", 2006) keeps an estimate y and a residual q with
(I - d S) y + q = b: pushing node u moves q(u) into y(u) and d S(v, u) q(u) to each neighbour v. In x's terms,
with p = D^1/2 y and rho = D^1/2 q >= 0, the exact solution is x = p + e, e = (I - d M)^-1 rho, and:

* e >= rho >= 0 (the series of a non-negative matrix);
* M deg = A 1 = deg on an undirected graph, so (I - d M)^-1 deg = deg / (1 - d), and once every node's
  rho(u) <= eps deg(u) (q(u) <= eps sqrt(deg(u))), e <= eps deg / (1 - d) node by node;
* unrolled, e = rho + d M e, so rho(v) <= e(v) <= rho(v) + d eps deg(v) / (1 - d) for every node, and three
  steps further for a few nodes, rho + d M rho + d^2 M^2 rho <= e <= the same + d^3 eps deg / (1 - d): eight
  times tighter at damping 0.5, for a gather over the node's neighbours' neighbours.

A push drains every node above eps (all of them at once, round by round), then bounds each passage's x within
an interval, the likeliest top ones (by the highest possible x) within the three-step one, and stops when the
intervals settle the top k as `certify.settled` asks: the k best in the exact order, their masses within
`TopK.rel`. Otherwise eps shrinks by about the factor the intervals fall short by (`certify.shortfall`) and
the push goes on. The work is the neighbourhood the reset's mass reaches above eps, not the graph: on a graph of
a million nodes, under a hundredth of one sparse product (bench/bench_certify.py). A reset spread over the whole
graph (the paper's min-max passage prior), or a tie, would need more than the budget; `solve_pagerank` then goes
on by conjugate gradients from what the push left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from engram.graph.certify import DRIFT, TopK, settled, shortfall
from engram.graph.cg import dots
from engram.graph.csr import row_entries

if TYPE_CHECKING:
    import scipy.sparse as sp

    from engram.graph.ppr import SymmetricWalk

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Entries a push may touch, as a fraction of the walk's non-zeros, before conjugate gradients take over: a pushed
# entry costs about twenty times a sparse product's, so the budget is about one product's time. A push stops
# sooner when its top cannot settle within the budget (a tie, or work that would pass it before eps is small
# enough). Measured choices of this and the two values below: docs/method.md, "The certified forward push".
PUSH_BUDGET = 0.05
# Walks with fewer non-zeros are solved by conjugate gradients alone unless a budget is asked for: there a whole
# solve costs about what the push's fixed work per round and per check does.
MIN_NONZEROS = 1 << 18
# The first eps: the largest residual per degree over this (a larger first drain does more of the work that
# every later check needs).
FIRST_STEP = 256.0
SHRINK = 2.0  # eps after an unsettled check: over 1.5 x the factor the intervals fall short by, at least this
LEAP = 64.0  # and at most this
LEVELS = 40  # checks at most (eps shrinks at least 2^40-fold): then the residual is at rounding level or the top ties


@dataclass(frozen=True)
class Pushed:
    """What a push leaves: the estimate y and its residual q ((I - d S) y + q = b), and the certified masses
    (x over the exact total; a dangling node's x is its reset) when the top settled, else None."""

    y: FloatArray
    residual: FloatArray
    masses: FloatArray | None
    work: int  # entries touched


def push_top(
    walk: SymmetricWalk,
    reset: FloatArray,
    damping: float,
    top: TopK,
    budget: float = PUSH_BUDGET,
    support: IntArray | None = None,
) -> Pushed:
    """Push the normalised `reset` (one column) until the top `top.k` nodes from `top.start` on are settled or
    `budget` x the walk's non-zeros entries are touched. Reads and writes the nodes the reset and the push
    reach, not every node (the arrays start as zeros the system provides untouched); `support`, sorted and
    distinct, holds every node where `reset` is not zero (default: found by a pass over it)."""
    n = walk.size
    support = np.flatnonzero(reset != 0) if support is None else support
    b = reset[support] * walk.inverse_root[support]
    y, residual, per_degree = np.zeros(n), np.zeros(n), np.zeros(n)
    residual[support] = b
    per_degree[support] = b * walk.inverse_root[support]  # rho(u) / deg(u)
    eps = float(per_degree[support].max()) / FIRST_STEP if len(support) else 0.0
    allowance, work = budget * walk.matrix.nnz, 0
    rhs = float(np.sqrt(dots(b, b)))  # not BLAS: its threads spin on after a call, taking the cores from the next
    pushed: list[IntArray] = []  # every round's pushed nodes
    before: tuple[float, int] | None = None  # the last check's eps and work
    for _ in range(LEVELS):
        if eps > 0.0:
            held = None if pushed else support  # before the first drain only the reset's nodes hold residual
            work += _drain(walk, y, residual, per_degree, damping, eps, allowance - work, pushed, held)
        if work > allowance:
            break
        values, slack = intervals(walk, y, residual, reset, damping, eps, top, rhs)
        if settled(values, slack, top.k, top.rel):
            return Pushed(y, residual, _masses(walk, y, values, reset, support, pushed, top.start, damping), work)
        need = shortfall(values, slack, top.k, top.rel)  # how much smaller eps must get, about
        if eps == 0.0 or need == np.inf or _projected(before, eps, work, need) > allowance:
            break  # a tie, or more work than the budget allows: conjugate gradients go on from here
        before = (eps, work)
        eps /= min(max(SHRINK, 1.5 * need), LEAP)
    return Pushed(y, residual, None, work)


def _masses(
    walk: SymmetricWalk,
    y: FloatArray,
    values: FloatArray,
    reset: FloatArray,
    support: IntArray,
    pushed: list[IntArray],
    start: int,
    damping: float,
) -> FloatArray:
    """x over the exact total (`certify.exact_total`), written where it is not zero: the pushed nodes before
    `start`, the nodes from `start` on (`values`), the dangling nodes the reset seeds."""
    still = support[walk.dangling[support]]
    total = (1.0 - damping * float(reset[still].sum())) / (1.0 - damping)
    masses = np.zeros(walk.size)
    nodes = np.unique(np.concatenate(pushed)) if pushed else np.zeros(0, dtype=np.int64)
    nodes = nodes[nodes < start]
    masses[nodes] = walk.root[nodes] * y[nodes] / total
    masses[still] = reset[still] / total
    masses[start:] = values / total
    return masses


def _projected(before: tuple[float, int] | None, eps: float, work: int, need: float) -> float:
    """The work a push will have done once eps is `need` times smaller, if its work keeps growing with 1 / eps
    as it did from the last check to this one (0 after the first check: nothing to go by yet)."""
    if before is None or work <= before[1] or before[1] <= 0:
        return 0.0
    growth = min(2.0, np.log(work / before[1]) / np.log(before[0] / eps))
    return float(work * need**growth)


def _drain(
    walk: SymmetricWalk,
    y: FloatArray,
    residual: FloatArray,
    per_degree: FloatArray,
    damping: float,
    eps: float,
    allowance: float,
    pushed: list[IntArray],
    held: IntArray | None = None,
) -> int:
    """Push every node whose residual per degree is at least `eps`, round after round (all of a round's nodes
    at once, each round's added to `pushed`), until none is left or `allowance` entries are touched; returns
    the entries touched. `held`, sorted and distinct: nodes outside which `per_degree` is zero (the first round
    then reads those, not every node)."""
    matrix = walk.matrix
    indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
    frontier = np.flatnonzero(per_degree >= eps) if held is None else held[per_degree[held] >= eps]
    work = 0
    while frontier.size and work <= allowance:
        pushed.append(frontier)
        at, _ = row_entries(indptr, frontier)
        lengths = (indptr[frontier + 1] - indptr[frontier]).astype(np.int64)
        moved = residual[frontier]
        y[frontier] += moved
        residual[frontier] = 0.0
        per_degree[frontier] = 0.0
        reached = indices[at]
        np.add.at(residual, reached, data[at] * np.repeat(moved * damping, lengths))
        fresh = residual[reached] * walk.inverse_root[reached]
        per_degree[reached] = fresh
        frontier = np.unique(reached[fresh >= eps])
        work += len(at)
    return work


def intervals(
    walk: SymmetricWalk,
    y: FloatArray,
    residual: FloatArray,
    reset: FloatArray,
    damping: float,
    eps: float,
    top: TopK,
    rhs: float,
) -> tuple[FloatArray, FloatArray]:
    """Midpoint and half-width of the interval each node from `top.start` on has x in, once no node's residual
    per degree is above `eps`; `rhs` is ||b||_2 (the push's rounding, at most `certify.DRIFT` x it per entry of y,
    widens every interval)."""
    s = top.start
    root = walk.root[s:]
    degree = root * root
    low = root * (y[s:] + residual[s:])
    width = (damping / (1.0 - damping)) * eps * degree
    likely = _likeliest(low + width, walk.dangling[s:], 2 * top.k + 4)
    if len(likely):
        low[likely] = root[likely] * (y[s + likely] + three_steps(walk.matrix, s + likely, residual, damping))
        width[likely] = (damping**3 / (1.0 - damping)) * eps * degree[likely]
    still = walk.dangling[s:]
    low[still], width[still] = reset[s:][still], 0.0  # a dangling node's x is its reset, exactly
    return low + width / 2, width / 2 + DRIFT * rhs * root


def _likeliest(high: FloatArray, dangling: npt.NDArray[np.bool_], m: int) -> IntArray:
    """The (up to) `m` nodes with the highest `high`, dangling ones left out."""
    if m < len(high):
        rows: IntArray = np.argpartition(-high, m - 1)[:m].astype(np.int64)
    else:
        rows = np.arange(len(high), dtype=np.int64)
    kept: IntArray = rows[~dangling[rows]]
    return kept


def three_steps(matrix: sp.csr_matrix, nodes: IntArray, residual: FloatArray, damping: float) -> FloatArray:
    """q(v) + d (S q)(v) + d^2 (S^2 q)(v) for each of `nodes` (none dangling): gathered over their neighbours'
    rows, not over the graph (S is symmetric, so (S^2 q)(v) sums S(v, u) (S q)(u) over v's neighbours u)."""
    indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
    at, starts = row_entries(indptr, nodes)
    reached, weights = indices[at], data[at]
    neighbours, back = np.unique(reached, return_inverse=True)
    their, their_starts = row_entries(indptr, neighbours.astype(np.int64))
    once_there = np.add.reduceat(data[their] * residual[indices[their]], their_starts)
    once = np.add.reduceat(weights * residual[reached], starts)
    twice = np.add.reduceat(weights * once_there[back], starts)
    out: FloatArray = residual[nodes] + damping * once + (damping * damping) * twice
    return out
