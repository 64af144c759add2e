"""The certified forward push (engram.graph.push). Oracles: a dense solve of the PageRank system, and the
full conjugate-gradient solve to 1e-13."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.graph.certify import SCORE_TOLERANCE, TopK
from engram.graph.ppr import solve_pagerank, symmetric_walk
from engram.graph.push import PUSH_BUDGET, _drain, intervals, push_top
from test_certify import bipartite, top_rows


def concentrated(rng: np.random.Generator, phrases: int, passages: int) -> np.ndarray:
    """A reset like the default method's: a few phrase seeds, and a passage prior that falls off sharply
    from the best passage (exp of the cosine gap over a small temperature)."""
    reset = np.zeros(phrases + passages)
    reset[rng.integers(0, phrases, 4)] = rng.random(4)
    cosine = rng.normal(0.3, 0.1, passages)
    reset[phrases:] = 0.3 * np.exp((cosine - cosine.max()) / 0.02)
    return reset / reset.sum()


def exact_x(walk, reset: np.ndarray, damping: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    system = np.identity(walk.size) - damping * walk.matrix.toarray()
    x = np.linalg.solve(system, reset * walk.inverse_root) * walk.root
    x[walk.dangling] = reset[walk.dangling]
    return x


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("damping", [0.3, 0.5, 0.85])
def test_every_interval_holds_the_exact_solution(seed: int, damping: float) -> None:
    """After draining to any eps, each passage's x lies in its interval (the three-step ones included), and
    the push kept its invariant (I - d S) y + q = b."""
    rng = np.random.default_rng(seed)
    phrases, passages = 300, 120
    walk = symmetric_walk(bipartite(rng, phrases, passages, 900))
    assert walk.dangling[phrases:].any()
    reset = concentrated(rng, phrases, passages)
    exact = exact_x(walk, reset, damping)[phrases:]
    b = reset * walk.inverse_root
    y, residual = np.zeros_like(b), b.copy()
    per_degree = residual * walk.inverse_root
    top = TopK(phrases, 3)
    tightened = 0
    for eps in np.geomspace(per_degree.max() / 2, per_degree.max() * 1e-7, 8):
        _drain(walk, y, residual, per_degree, damping, float(eps), np.inf, [])
        assert np.all(residual * walk.inverse_root < eps)  # drained: nothing left above eps
        invariant = y - damping * (walk.matrix @ y) + residual
        assert np.abs(invariant - b).max() < 1e-13
        values, slack = intervals(walk, y, residual, reset, damping, float(eps), top, float(np.linalg.norm(b)))
        assert np.all(np.abs(exact - values) <= slack * (1 + 1e-9) + 1e-15)
        one_step = (damping / (1 - damping)) * float(eps) * walk.root[phrases:] ** 2 / 2
        tightened += int(np.sum(slack < one_step * (1 + damping**2) / 2))  # three steps: d^2 the width
    assert tightened > 0  # the likeliest nodes did get the three-step intervals


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("k", [1, 3, 10])
def test_a_settled_push_gives_the_exact_top_and_masses(seed: int, k: int) -> None:
    rng = np.random.default_rng(100 + seed)
    phrases, passages = 400, 150
    walk = symmetric_walk(bipartite(rng, phrases, passages, 1200))
    reset = concentrated(rng, phrases, passages)
    tight = solve_pagerank(walk, reset, 0.5, tol=1e-13)
    pushed = push_top(walk, reset, 0.5, TopK(phrases, k), budget=100.0)
    assert pushed.masses is not None
    masses = pushed.masses
    want = top_rows(tight[phrases:], k)
    assert top_rows(masses[phrases:], k) == want
    exact = tight[phrases:][want]
    assert np.all(np.abs(masses[phrases:][want] - exact) <= SCORE_TOLERANCE * exact)
    solved = solve_pagerank(walk, reset, 0.5, top=TopK(phrases, k), push_budget=PUSH_BUDGET)  # through the solver
    assert top_rows(solved[phrases:], k) == want


def test_the_push_stays_in_the_reset_s_component() -> None:
    """Forty copies of one graph side by side, the reset in one of them: the push settles the top (of every
    node here) touching that copy's entries only, and the answer is that of the copy alone."""
    rng = np.random.default_rng(7)
    one = bipartite(rng, 200, 80, 700)
    n, copies, home = one.shape[0], 40, 3
    walk = symmetric_walk(sp.block_diag([one] * copies, format="csr"))
    reset_one = concentrated(rng, 200, 80)
    reset = np.zeros(copies * n)
    reset[home * n : (home + 1) * n] = reset_one
    pushed = push_top(walk, reset, 0.5, TopK(0, 3), budget=1.0)
    assert pushed.masses is not None
    assert pushed.work <= 20 * one.nnz  # a few passes over one copy's entries, not over forty copies
    alone = solve_pagerank(symmetric_walk(one), reset_one, 0.5, tol=1e-13)
    masses = pushed.masses
    assert top_rows(masses, 3) == [home * n + i for i in top_rows(alone, 3)]


def test_a_spent_budget_leaves_a_valid_start_and_no_answer() -> None:
    rng = np.random.default_rng(11)
    phrases, passages = 300, 120
    walk = symmetric_walk(bipartite(rng, phrases, passages, 900))
    reset = np.full(phrases + passages, 1.0 / (phrases + passages))  # spread over every node: no local top
    pushed = push_top(walk, reset, 0.5, TopK(phrases, 10), budget=0.01)
    assert pushed.masses is None
    assert 0 < pushed.work <= walk.matrix.nnz  # stopped within a round of its budget
    b = reset * walk.inverse_root
    invariant = pushed.y - 0.5 * (walk.matrix @ pushed.y) + pushed.residual
    assert np.abs(invariant - b).max() < 1e-13


def chained_memory(path: Path, rng: np.random.Generator, names: list[str], documents: int, relation: str) -> Memory:
    """A memory of `documents` passages, each a chain of three `relation` triples over four of `names`."""
    docs, extractions = [], []
    for i in range(documents):
        picked = rng.choice(len(names), 4, replace=False)
        triples = [[names[picked[j]], relation, names[picked[j + 1]]] for j in range(3)]
        docs.append(Document(f"d{i}", ". ".join(" ".join(t) for t in triples) + "."))
        extractions.append({"id": f"d{i}", "triples": triples})
    memory = Memory(path, embedder=HashEmbedder(), llm=False)
    memory.index(docs, extractions=extractions)
    return memory


def test_the_view_reads_a_reset_sparsely_and_the_passage_masses_alone(tmp_path: Path) -> None:
    """`GraphIndex.canonical_reset` equals `resets[node_rows]` (dead rows dropped), and `passage_ppr` equals the
    passage rows of `ppr`, after deletes left dead phrase and passage rows."""
    rng = np.random.default_rng(5)
    names = [f"place {i}" for i in range(30)]
    with chained_memory(tmp_path / "m", rng, names, 24, "is near") as memory:
        memory.delete(["d3", "d7", "d11"])
        index = memory.context().view
        rows = index.n_phrases + len(index.passages)
        assert len(index.node_rows) < rows  # dead rows left behind
        for shape in ((rows,), (rows, 3)):
            resets = np.zeros(shape)
            resets[rng.integers(0, index.n_phrases, 6)] = 1.0  # seeds, some maybe on dead phrases
            resets[index.n_phrases :] = rng.random((rows - index.n_phrases, *shape[1:]))
            assert np.array_equal(index.canonical_reset(resets), resets[index.node_rows])
            for k in (None, 3):
                full = index.ppr(resets, 0.5, top=k)[index.n_phrases :]
                assert np.array_equal(index.passage_ppr(resets, 0.5, top=k), full)


def test_retrieval_ranks_the_same_with_the_push_as_with_conjugate_gradients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end, the default method's top passages and their scores through the push (forced on for this small
    graph) are those through conjugate gradients alone."""
    from engram.graph import push

    rng = np.random.default_rng(9)
    names = [f"river town {i}" for i in range(40)]
    queries = [f"Which town trades with {names[i]}?" for i in range(0, 40, 3)]
    with chained_memory(tmp_path / "m", rng, names, 60, "trades with") as memory:
        memory.delete(["d5", "d17"])
        ranked, settled = {}, []
        real = push.push_top

        def noted(*args: object, **kwargs: object) -> push.Pushed:
            out = real(*args, **kwargs)  # type: ignore[arg-type]
            settled.append(out.masses is not None)
            return out

        monkeypatch.setattr(push, "push_top", noted)
        for label, floor, budget in (("push", 0, 100.0), ("cg", 1 << 62, push.PUSH_BUDGET)):
            monkeypatch.setattr(push, "MIN_NONZEROS", floor)
            monkeypatch.setattr(push, "PUSH_BUDGET", budget)
            ranked[label] = [memory.retrieve(q, top_k=5)[0].passages for q in queries]
        assert len(settled) == len(queries) and sum(settled) >= len(queries) // 2  # the push did answer
        for a, b in zip(ranked["push"], ranked["cg"]):
            assert [p.id for p in a] == [p.id for p in b]
            assert np.allclose([p.score for p in a], [p.score for p in b], rtol=2 * SCORE_TOLERANCE)


def test_a_drain_from_the_nodes_that_hold_residual_is_the_drain_from_every_node() -> None:
    """The first drain reads the reset's nodes alone (`held`): the same frontier, so the same arrays to the bit
    (a reset held on a subset that also lists nodes where it is zero)."""
    rng = np.random.default_rng(3)
    phrases, passages = 300, 120
    walk = symmetric_walk(bipartite(rng, phrases, passages, 900))
    reset = concentrated(rng, phrases, passages)
    support = np.union1d(np.flatnonzero(reset), rng.choice(phrases, 20, replace=False)).astype(np.int64)
    b = reset * walk.inverse_root
    start = b * walk.inverse_root
    eps = float(np.quantile(start[start > 0], 0.3))  # most of the reset's nodes are pushed in the first round
    runs = []
    for held in (None, support):
        y, residual = np.zeros_like(b), b.copy()
        per_degree = residual * walk.inverse_root
        pushed: list[np.ndarray] = []
        work = _drain(walk, y, residual, per_degree, 0.5, eps, np.inf, pushed, held)
        runs.append((work, y, residual, per_degree, np.concatenate(pushed)))
    assert runs[0][0] == runs[1][0] > 0
    assert np.count_nonzero(start >= eps) > 1
    for a, b_ in zip(runs[0][1:], runs[1][1:]):
        assert np.array_equal(a, b_)
