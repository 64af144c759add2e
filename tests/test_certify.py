"""A PageRank solve that stops once the top of the ranking is settled (engram.graph.certify). Oracles: the same
solve run to 1e-13, power iteration, sampling inside the bounds, and the solver's own product count."""

import numpy as np
import pytest
import scipy.sparse as sp

from engram.graph import ppr
from engram.graph.certify import (
    SCORE_TOLERANCE,
    TopK,
    error_bound,
    exact_total,
    node_bounds,
    settled,
    shortfall,
    top_unsettled,
)
from engram.graph.ppr import personalized_pagerank, solve_pagerank, symmetric_walk, walk_operator
from engram.graph.push import PUSH_BUDGET


def bipartite(rng: np.random.Generator, phrases: int, passages: int, links: int) -> sp.csr_matrix:
    """A graph shaped like engram's: phrase nodes first, then passage nodes; phrase-phrase and phrase-passage
    edges of random weight, so some nodes are dangling."""
    n = phrases + passages
    a = rng.integers(0, phrases, links)
    b = np.where(rng.random(links) < 0.5, rng.integers(0, phrases, links), rng.integers(phrases, n, links))
    keep = a != b
    a, b = a[keep], b[keep]
    w = rng.random(len(a)) + 0.1
    return sp.coo_matrix((np.r_[w, w], (np.r_[a, b], np.r_[b, a])), shape=(n, n)).tocsr()


def top_rows(values: np.ndarray, k: int) -> list[int]:
    return [int(i) for i in np.argsort(-values, kind="stable")[:k]]


def test_settled_means_no_value_inside_the_bounds_reorders_the_top() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(300):
        n = int(rng.integers(1, 30))
        values = rng.random(n)
        slack = rng.random(n) * 10 ** rng.uniform(-4, -1)
        k = int(rng.integers(1, n + 1))
        if not settled(values, slack.copy(), k):
            continue
        checked += 1
        want = top_rows(values, k)
        for _ in range(50):  # any true values within the slack rank the same top k, in order
            true = values + slack * rng.uniform(-1, 1, n)
            assert top_rows(true, k) == want
    assert checked > 50


def test_settled_refuses_overlaps_and_ties() -> None:
    assert settled(np.array([3.0, 2.0, 1.0]), np.array([0.4, 0.4, 0.4]), 2)
    assert not settled(np.array([3.0, 2.0, 1.0]), np.array([0.6, 0.4, 0.0]), 2)  # 1st and 2nd may swap
    assert not settled(np.array([3.0, 2.0, 1.7]), np.array([0.1, 0.1, 0.3]), 2)  # 3rd may overtake the 2nd
    assert settled(np.array([3.0, 2.0, 1.7]), np.array([0.1, 0.1, 0.3]), 1)
    assert not settled(np.array([1.0, 1.0]), np.zeros(2), 1)  # an exact tie never settles
    assert settled(np.array([5.0]), np.array([9.0]), 1)  # nothing to rank against
    assert settled(np.zeros(0), np.zeros(0), 3)
    assert not settled(np.array([3.0, 1.0]), np.array([0.01, 0.0]), 1, rel=1e-3)  # 3 +- 0.01: not within 0.1 %
    assert settled(np.array([3.0, 1.0]), np.array([0.01, 0.0]), 1, rel=1e-2)
    assert not settled(np.array([3.0, 1.0]), np.array([0.01, 0.0]), 1, rel=0.01 / 3)  # of 2.99, not of 3


def settled_by_sorting(values: np.ndarray, slack: np.ndarray, k: int, rel: float) -> bool:
    """`settled` as it reads without its early look at the largest value: the top k by a stable sort."""
    n = len(values)
    if n == 0:
        return True
    k = min(k, n)
    top = np.argsort(-values, kind="stable")[:k]
    low, high = values[top] - slack[top], values[top] + slack[top]
    if rel < np.inf and not bool(np.all(slack[top] <= rel * low)):
        return False
    if k > 1 and not bool(np.all(low[:-1] > high[1:])):
        return False
    rest = values + slack
    rest[top] = -np.inf
    return k == n or bool(low[-1] > rest.max())


def test_settled_by_its_largest_value_first_agrees_with_sorting() -> None:
    """Ties at the top included (values from a few levels): the early refusal at the largest value never refuses
    what the full check would settle."""
    rng = np.random.default_rng(7)
    outcomes = set()
    for _ in range(2000):
        n = int(rng.integers(1, 12))
        values = rng.choice([1.0, 0.999, 0.5, 0.2], n) if rng.random() < 0.5 else rng.random(n)
        slack = rng.random(n) * 10 ** rng.uniform(-5, -1)
        k = int(rng.integers(1, n + 1))
        rel = float(rng.choice([np.inf, 1e-3, 1e-2, 0.1]))
        found = settled(values, slack, k, rel)
        assert found == settled_by_sorting(values, slack, k, rel), (values, slack, k, rel)
        outcomes.add(found)
    assert outcomes == {True, False}


def test_refusing_at_the_largest_values_alone_is_the_full_checks_refusal() -> None:
    """`top_unsettled` (the bounds of the k largest values alone) against `node_bounds` over every node, then
    `settled`: it refuses when the slack of one of the k largest values is more than `rel` of its low end, not
    when every value from the k-th up is within it, and whenever it refuses `settled` does too."""
    rng = np.random.default_rng(11)
    outcomes = set()
    for _ in range(4000):
        n = int(rng.integers(1, 12))
        roots = rng.random(n) * 3
        roots[rng.random(n) < 0.2] = 0.0  # dangling nodes: exact values, no slack
        values = rng.choice([1.0, 0.999, 0.5], n) if rng.random() < 0.3 else rng.random(n)
        residual = rng.normal(size=n) * 10 ** rng.uniform(-7, -2)
        norms = rng.random(n)
        residual_norm, rhs, damping = float(np.abs(residual).sum()), float(rng.uniform(0.5, 2)), 0.5
        rel = float(rng.choice([np.inf, 1e-3, 1e-2, 0.1]))
        k = int(rng.integers(1, n + 2))
        slack = roots * node_bounds(residual, norms, np.asarray(residual_norm), np.asarray(rhs), damping)[:, 0]
        refused = top_unsettled(values, roots, residual, norms, residual_norm, rhs, damping, rel, k)
        fails = ~(slack <= rel * (values - slack))
        kth = np.sort(values)[::-1][min(k, n) - 1]
        if n < 2 or rel == np.inf:
            assert not refused
        elif fails[values > kth].any():  # in every choice of the k largest
            assert refused
        elif not fails[values >= kth].any():  # in none
            assert not refused
        if refused:
            assert not settled(values, slack, k, rel)
        outcomes.add(refused)
    assert outcomes == {True, False}


def test_shortfall_is_the_factor_the_slack_must_shrink_by() -> None:
    """Below 1 exactly when settled; slack shrunk by a little more than it settles, by a little less does not;
    inf for a tie."""
    rng = np.random.default_rng(4)
    checked = 0
    for _ in range(400):
        n = int(rng.integers(1, 30))
        values = rng.random(n)
        slack = rng.random(n) * 10 ** rng.uniform(-4, -1)
        k = int(rng.integers(1, n + 1))
        rel = float(rng.choice([np.inf, 1e-3, 1e-2]))
        need = shortfall(values, slack, k, rel)
        assert (need < 1) == settled(values, slack, k, rel)
        if 1.0 < need < np.inf:
            checked += 1
            assert settled(values, slack / (need * 1.001), k, rel)
            assert not settled(values, slack / (need * 0.999), k, rel)
    assert checked > 100
    assert shortfall(np.array([1.0, 1.0, 0.5]), np.full(3, 1e-9), 1) == np.inf  # a tie at the top
    assert shortfall(np.array([2.0, 1.0]), np.array([0.5, 1.0]), 1) == pytest.approx(1.5)


def test_error_bound_covers_the_distance_to_the_solution() -> None:
    """The bound from the residual holds for every iterate: checked against the exact solution."""
    rng = np.random.default_rng(1)
    walk = symmetric_walk(bipartite(rng, 200, 100, 900))
    b = rng.random(300) * walk.inverse_root
    damping = 0.5
    system = sp.identity(300) - damping * walk.matrix
    exact = np.linalg.solve(system.toarray(), b)
    for y in (b, b * 0.9, exact + rng.standard_normal(300) * 1e-3):
        residual = b - system @ y
        bound = error_bound(np.array([np.linalg.norm(residual)]), np.array([np.linalg.norm(b)]), damping)
        assert np.linalg.norm(y - exact) <= bound[0]


def test_node_bounds_cover_each_entry_and_are_tighter_than_the_norm() -> None:
    """The per-node bound from the residual's entries and the rows' norms holds entry by entry for every iterate
    (oracle: the exact solution by a dense solve), is never above the 2-norm bound, and is below it somewhere;
    the same for the rows from some start on, several columns at once."""
    rng = np.random.default_rng(4)
    walk = symmetric_walk(bipartite(rng, 200, 100, 900))
    dense = walk.matrix.toarray()
    norms = np.sqrt((dense**2).sum(axis=1))
    assert np.allclose(walk.row_norms(0), norms, rtol=1e-12) and np.allclose(walk.row_norms(150), norms[150:])
    for damping in (0.3, 0.5, 0.85):
        system = np.identity(300) - damping * dense
        b = rng.random((300, 2)) * walk.inverse_root[:, None]
        exact = np.linalg.solve(system, b)
        inverse = np.linalg.inv(system)
        worst = []  # for a node v, the residual of norm 1 and r(v) = 0 that puts the most error on v
        for v in rng.integers(0, 300, 6):
            r = inverse[:, v].copy()
            r[v] = 0.0
            worst.append(exact - (inverse @ np.column_stack([r, -r])) / np.linalg.norm(r))
        iterates = [b, b * 0.9, exact + rng.standard_normal((300, 2)) * 1e-3, exact + rng.standard_normal((300, 2))]
        for y in iterates + worst:
            residual = b - system @ y
            rr, rhs = np.linalg.norm(residual, axis=0), np.linalg.norm(b, axis=0)
            bounds = node_bounds(residual, walk.row_norms(0), rr, rhs, damping)
            assert np.all(np.abs(y - exact) <= bounds)
            assert np.all(bounds <= error_bound(rr, rhs, damping)[None, :] * (1 + 1e-12))
            assert np.any(bounds < 0.9 * error_bound(rr, rhs, damping)[None, :])
            tail = node_bounds(residual[150:, 0], walk.row_norms(150), rr[:1], rhs[:1], damping)
            assert tail.shape == (150, 1) and np.all(np.abs(y[150:, 0] - exact[150:, 0]) <= tail[:, 0])


def test_the_exact_total_needs_no_solve() -> None:
    """sum(x) of the exact solution, from the reset alone (with dangling nodes in the graph)."""
    rng = np.random.default_rng(2)
    walk = symmetric_walk(bipartite(rng, 200, 100, 300))
    assert walk.dangling.any()
    resets = rng.random((300, 2)) * (rng.random((300, 2)) < 0.3)
    resets /= resets.sum(axis=0)
    for damping in (0.0, 0.5, 0.85):
        system = sp.identity(300) - damping * walk.matrix
        y = np.linalg.solve(system.toarray(), resets * walk.inverse_root[:, None])
        x = y * walk.root[:, None]
        x[walk.dangling] = resets[walk.dangling]
        assert np.allclose(exact_total(resets, walk.dangling, damping), x.sum(axis=0), rtol=1e-12)
        assert np.allclose(exact_total(resets[:, 0], walk.dangling, damping), x[:, 0].sum(), rtol=1e-12)
        for reset in (resets, resets[:, 0]):  # the dangling nodes' rows give the mask's floats
            by_rows = exact_total(reset, walk.dangling_rows, damping)
            assert np.array_equal(by_rows, exact_total(reset, walk.dangling, damping))
    assert np.array_equal(walk.dangling_rows, np.flatnonzero(walk.dangling))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("k", [1, 3, 10])
@pytest.mark.parametrize("budget", [0.0, PUSH_BUDGET, 10.0])  # conjugate gradients alone, the push first, a long push
def test_top_of_an_early_stop_is_the_exact_ranking(seed: int, k: int, budget: float | None) -> None:
    rng = np.random.default_rng(seed)
    phrases, passages = 400, 150
    adjacency = bipartite(rng, phrases, passages, 1200)
    walk = symmetric_walk(adjacency)
    resets = np.zeros((phrases + passages, 3))
    resets[rng.integers(0, phrases, 12), rng.integers(0, 3, 12)] = rng.random(12)  # a few phrase seeds
    resets[phrases:] = 0.05 * rng.random((passages, 3))  # every passage a little
    tight = solve_pagerank(walk, resets, 0.5, tol=1e-13)
    power = personalized_pagerank(walk_operator(adjacency), resets, 0.5, tol=1e-15, max_iter=1000)
    early = solve_pagerank(walk, resets, 0.5, top=TopK(phrases, k), push_budget=budget)
    for column in range(3):
        want = top_rows(tight[phrases:, column], k)
        assert want == top_rows(power[phrases:, column], k)
        assert top_rows(early[phrases:, column], k) == want
        exact = tight[phrases:, column][want]  # the masses too, within SCORE_TOLERANCE
        assert np.all(np.abs(early[phrases:, column][want] - exact) <= SCORE_TOLERANCE * exact)
    single = solve_pagerank(walk, resets[:, 0], 0.5, top=TopK(phrases, k), push_budget=budget)
    assert top_rows(single[phrases:], k) == top_rows(tight[phrases:, 0], k)


@pytest.mark.parametrize("k", [1, 3, 10, 40])
def test_the_cheap_refusal_changes_no_stop(k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vector solve stopped by the checks with `top_unsettled` first gives the same floats as one whose every
    check bounds every passage (the refusal replaced by one that never refuses): the same iterate stops it."""
    rng = np.random.default_rng(k)
    phrases, passages = 400, 150
    walk = symmetric_walk(bipartite(rng, phrases, passages, 1200))
    resets = []
    for _ in range(6):
        reset = np.zeros(phrases + passages)
        reset[rng.integers(0, phrases, 8)] = rng.random(8)
        reset[phrases:] = 0.05 * rng.random(passages) ** 8  # a sharp prior: a few passages carry most of it
        resets.append(reset)
    with_refusal = [solve_pagerank(walk, r, 0.5, top=TopK(phrases, k), push_budget=0) for r in resets]
    monkeypatch.setattr(ppr, "top_unsettled", lambda *args: False)
    for reset, got in zip(resets, with_refusal):
        assert np.array_equal(solve_pagerank(walk, reset, 0.5, top=TopK(phrases, k), push_budget=0), got)


def test_an_early_stop_takes_fewer_products_and_a_tie_runs_to_the_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    phrases, passages = 400, 150
    adjacency = bipartite(rng, phrases, passages, 1200)
    reset = np.zeros(phrases + passages)
    reset[:5] = 1.0
    reset[phrases:] = 0.05 * rng.random(passages)
    walk = symmetric_walk(adjacency)
    counted = {"products": 0}
    product = ppr.SymmetricWalk.product

    def counting(self: ppr.SymmetricWalk, x: np.ndarray) -> np.ndarray:
        counted["products"] += 1
        return product(self, x)

    monkeypatch.setattr(ppr.SymmetricWalk, "product", counting)
    full = solve_pagerank(walk, reset, 0.5)
    at_tolerance, counted["products"] = counted["products"], 0
    early = solve_pagerank(walk, reset, 0.5, top=TopK(phrases, 3), push_budget=0)  # conjugate gradients alone
    assert counted["products"] < at_tolerance
    assert top_rows(early[phrases:], 3) == top_rows(full[phrases:], 3)

    twin = sp.lil_matrix(adjacency)  # two passages with the same neighbours and the same reset: an exact tie
    twin[phrases + 1, :] = 0
    twin[:, phrases + 1] = 0
    twin[phrases, :] = 0
    twin[:, phrases] = 0
    for passage in (phrases, phrases + 1):
        twin[0, passage] = twin[passage, 0] = 5.0
    tied = reset.copy()
    tied[phrases : phrases + 2] = 10.0  # the two lead the ranking
    walk = symmetric_walk(sp.csr_matrix(twin))
    counted["products"] = 0
    full = solve_pagerank(walk, tied, 0.5)
    at_tolerance, counted["products"] = counted["products"], 0
    early = solve_pagerank(walk, tied, 0.5, top=TopK(phrases, 1), push_budget=0)
    assert counted["products"] == at_tolerance  # never settled: the same solve as without `top`
    assert np.array_equal(early, full)
    counted["products"] = 0
    pushed = solve_pagerank(walk, tied, 0.5, top=TopK(phrases, 1), push_budget=PUSH_BUDGET)  # nor does a push
    assert counted["products"] > 0  # conjugate gradients went on from the push, to the tolerance
    assert np.abs(pushed - full).max() < 1e-9
