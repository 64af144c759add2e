import numpy as np
import pytest
import scipy.sparse as sp

from engram.graph.certify import TopK
from engram.graph.ppr import personalized_pagerank, solve_pagerank, symmetric_walk, walk_operator
from engram.retrieve.scoring import top_k

igraph = pytest.importorskip("igraph")


def random_graph(rng: np.random.Generator, n: int, m: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray]:
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    a, b = a[keep], b[keep]
    w = rng.random(len(a)) + 0.1
    adj = sp.coo_matrix((np.r_[w, w], (np.r_[a, b], np.r_[b, a])), shape=(n, n)).tocsr()
    return adj, a, b, w


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("edges", [40, 200])  # sparse graphs have dangling nodes
def test_matches_igraph_prpack(seed: int, edges: int) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    adj, a, b, w = random_graph(rng, n, edges)
    g = igraph.Graph(n=n, edges=list(zip(a.tolist(), b.tolist())), directed=False)
    g.es["weight"] = w.tolist()
    reset = rng.random(n) * (rng.random(n) < 0.3)
    reset[0] += 0.1
    for damping in (0.5, 0.85):
        ref = np.array(g.personalized_pagerank(damping=damping, reset=reset.tolist(), weights="weight", directed=False))
        ours = personalized_pagerank(walk_operator(adj), reset, damping)
        assert np.abs(ref - ours).max() < 1e-6
        solved = solve_pagerank(symmetric_walk(adj), reset, damping)  # at PRPACK's tolerance, 1e-10
        assert np.abs(ref - solved).max() < 1e-6
        assert np.abs(ours - solved).max() < 1e-9
        tight = solve_pagerank(symmetric_walk(adj), reset, damping, tol=1e-13)
        assert np.abs(ours - tight).max() < 1e-12


def test_batched_columns_equal_single_runs() -> None:
    rng = np.random.default_rng(7)
    adj, *_ = random_graph(rng, 30, 80)
    op = walk_operator(adj)
    resets = rng.random((30, 3))
    batch = personalized_pagerank(op, resets)
    for j in range(3):
        assert np.allclose(batch[:, j], personalized_pagerank(op, resets[:, j]), atol=1e-12)
    assert np.allclose(batch.sum(axis=0), 1.0)


def test_rejects_bad_reset() -> None:
    op = walk_operator(sp.csr_matrix(np.ones((2, 2))))
    with pytest.raises(ValueError):
        personalized_pagerank(op, [0.0, 0.0])
    with pytest.raises(ValueError):
        personalized_pagerank(op, [1.0, -1.0])
    with pytest.raises(ValueError):
        personalized_pagerank(op, [1.0])


def test_solver_batches_and_rejects_like_power_iteration() -> None:
    rng = np.random.default_rng(11)
    adj, *_ = random_graph(rng, 500, 900)  # with dangling nodes
    walk = symmetric_walk(adj)
    assert walk.dangling.any()
    resets = rng.random((500, 3)) * (rng.random((500, 3)) < 0.2)
    batch = solve_pagerank(walk, resets, 0.5, tol=1e-13)
    power = personalized_pagerank(walk_operator(adj), resets, 0.5, tol=1e-15, max_iter=1000)
    assert np.abs(batch - power).max() < 1e-13
    assert np.allclose(batch.sum(axis=0), 1.0, atol=1e-14)
    for j in range(3):
        assert np.abs(batch[:, j] - solve_pagerank(walk, resets[:, j], 0.5, tol=1e-13)).max() < 1e-13
    default = solve_pagerank(walk, resets, 0.5)  # PRPACK's tolerance: fewer products, still within 1e-10
    assert 1e-16 < np.abs(default - power).max() < 1e-10
    with pytest.raises(ValueError):
        solve_pagerank(walk, np.zeros(500))
    with pytest.raises(ValueError):
        solve_pagerank(walk, np.ones(499))
    for bad in (np.nan, np.inf, -np.inf, -0.5):  # one bad entry among good ones, in a vector or a column
        spoiled = np.ones(500)
        spoiled[7] = bad
        with pytest.raises(ValueError, match="finite, non-negative"):
            solve_pagerank(walk, spoiled)
        with pytest.raises(ValueError, match="finite, non-negative"):
            solve_pagerank(walk, np.stack([np.ones(500), spoiled], axis=1))


@pytest.mark.parametrize("budget", [0.0, 10.0])  # conjugate gradients alone, the push first
def test_columns_stopped_at_their_top_are_each_solved_as_a_vector(budget: float) -> None:
    """With `top`, each column of a matrix reset is solved on its own: its masses are its vector's to the bit
    (one column's own stop, not the slowest column's), and its top is the exact solution's."""
    rng = np.random.default_rng(17)
    adj, *_ = random_graph(rng, 600, 2400)
    walk = symmetric_walk(adj)
    resets = rng.random((600, 5)) * (rng.random((600, 5)) < 0.05)
    resets[500:] += 0.01 * rng.random((100, 5))  # every "passage" seeded a little, as retrieval does
    top = TopK(500, 5)
    block = solve_pagerank(walk, resets, 0.5, top=top, push_budget=budget)
    exact = solve_pagerank(walk, resets, 0.5, tol=1e-14)
    for j in range(5):
        alone = solve_pagerank(walk, resets[:, j], 0.5, top=top, push_budget=budget)
        assert np.array_equal(block[:, j], alone)
        assert (top_k(block[500:, j], 5) == top_k(exact[500:, j], 5)).all()


@pytest.mark.parametrize("budget", [0.0, 10.0])  # conjugate gradients alone, the push first
def test_a_reset_given_with_its_support_is_read_there_alone(budget: float) -> None:
    """A caller that knows where its reset is non-zero passes those nodes: the same masses as the reset read
    whole (up to the normalising sum's order), and bad entries among them refused the same way."""
    rng = np.random.default_rng(5)
    adj, *_ = random_graph(rng, 400, 1200)
    walk = symmetric_walk(adj)
    reset = rng.random(400) * (rng.random(400) < 0.1)
    support = np.flatnonzero(reset)
    wider = np.union1d(support, [0, 1, 2, 399])  # a support may hold zeros too
    top = TopK(300, 5)
    whole = solve_pagerank(walk, reset, 0.5, tol=1e-13)
    for nodes in (support, wider):
        given = solve_pagerank(walk, reset, 0.5, tol=1e-13, support=nodes)
        assert np.abs(given - whole).max() < 1e-14
        ranked = solve_pagerank(walk, reset, 0.5, top=top, push_budget=budget, support=nodes)
        assert (top_k(ranked[300:], 5) == top_k(whole[300:], 5)).all()
    for bad in (np.nan, np.inf, -0.5):
        spoiled = reset.copy()
        spoiled[support[3]] = bad
        with pytest.raises(ValueError, match="finite, non-negative"):
            solve_pagerank(walk, spoiled, support=support)
    with pytest.raises(ValueError, match="positive mass"):
        solve_pagerank(walk, np.zeros(400), support=support)


def test_parallel_products_give_the_same_floats(monkeypatch: pytest.MonkeyPatch) -> None:
    from engram.graph import parallel

    monkeypatch.setattr(parallel, "THREADS", 3)
    monkeypatch.setattr(parallel, "MIN_WORK", 10)
    rng = np.random.default_rng(5)
    adj, *_ = random_graph(rng, 2000, 9000)
    walk = symmetric_walk(adj)
    blocks = parallel.row_blocks(walk.matrix)
    assert len(blocks) == 3
    assert all(np.shares_memory(block.data, walk.matrix.data) for *_, block in blocks)  # views, not copies
    for x in (rng.random(2000), rng.random((2000, 4))):
        assert np.array_equal(parallel.matvec(blocks, x), walk.matrix @ x)
    by_length = [(a, b, parallel.length_sorted(block)) for a, b, block in blocks]
    x = rng.random(2000)
    assert np.array_equal(parallel.matvec(by_length, x), walk.matrix @ x)  # each row's sum in its own order
    vectors = rng.standard_normal((3001, 64)).astype(np.float32)
    vector = rng.standard_normal(64).astype(np.float32)
    exact = vectors.astype(np.float64) @ vector.astype(np.float64)
    for kernel in ("einsum", "simsimd"):
        monkeypatch.setattr(parallel, "DOT_KERNEL", kernel)
        whole = parallel.row_dots(vectors, vector)
        assert np.abs(whole - exact).max() < 1e-5  # the oracle: float64 dots
        if kernel == "einsum" or parallel.dot_kernel() is None:
            assert np.array_equal(whole, np.einsum("ij,j->i", vectors, vector))
        # a row's float does not depend on its position, the block it is in or the threads
        assert np.array_equal(parallel.row_dots(vectors[1:], vector), whole[1:])
        assert np.array_equal(parallel.row_dots(vectors[::2], vector), whole[::2])
        assert np.array_equal(parallel.row_dots(np.ascontiguousarray(vectors[7:9]), vector), whole[7:9])
        monkeypatch.setattr(parallel, "THREADS", 1)
        assert np.array_equal(parallel.row_dots(vectors, vector), whole)
        monkeypatch.setattr(parallel, "THREADS", 3)
        assert parallel.row_dots(vectors[:0], vector).shape == (0,)


def test_chunked_solver_agrees_and_its_floats_do_not_depend_on_the_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph of more than CHUNK_ROWS nodes is solved in fused steps over chunks of rows. Oracles: power
    iteration run to 1e-15, the one-chunk solver, and the chunked solve on 1 and on 3 threads (the same bits)."""
    from engram.graph import parallel

    rng = np.random.default_rng(13)
    adj, *_ = random_graph(rng, 3000, 7000)  # with dangling nodes
    resets = rng.random((3000, 2)) * (rng.random((3000, 2)) < 0.1)
    whole = solve_pagerank(symmetric_walk(adj), resets, 0.5, tol=1e-13)
    assert len(symmetric_walk(adj).chunks.parts) == 1  # a small graph: one chunk, the plain solver
    monkeypatch.setattr(parallel, "CHUNK_ROWS", 256)
    solved = {}
    for threads in (1, 3):
        monkeypatch.setattr(parallel, "THREADS", threads)
        walk = symmetric_walk(adj)
        assert len(walk.chunks.parts) == 12 and len(walk.chunks.groups) == threads
        solved[threads] = solve_pagerank(walk, resets, 0.5, tol=1e-13)
        single = solve_pagerank(walk, resets[:, 1], 0.5, tol=1e-13)
        assert np.abs(single - solved[threads][:, 1]).max() < 1e-13
    assert np.array_equal(solved[1], solved[3])
    power = personalized_pagerank(walk_operator(adj), resets, 0.5, tol=1e-15, max_iter=1000)
    assert np.abs(solved[1] - power).max() < 1e-13
    assert np.abs(solved[1] - whole).max() < 1e-14


def test_rows_sorted_by_length_give_the_same_floats() -> None:
    """`length_sorted`: rows of 0 to 60 entries, mixed, in runs of one length, each row's entries in an order
    that is not its columns' (a sum's order is kept, not re-sorted); the product is scipy's on the original
    matrix, bit for bit, for vectors (matrices of vectors stay on the original rows)."""
    from engram.graph import parallel

    rng = np.random.default_rng(8)
    n = 700
    lengths = rng.choice([0, 1, 2, 3, 7, 60], n)
    rows = np.repeat(np.arange(n), lengths)
    columns = rng.integers(0, n, len(rows))
    matrix = sp.csr_matrix((rng.standard_normal(len(rows)), columns, np.r_[0, np.cumsum(lengths)]), shape=(n, n))
    assert not matrix.has_sorted_indices
    sorted_rows = parallel.length_sorted(matrix)
    assert np.all(np.diff(np.diff(sorted_rows.matrix.indptr)) >= 0)  # rows by length
    for _ in range(3):
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)  # magnitudes far apart: order shows
        assert np.array_equal(sorted_rows.times(x), matrix @ x)
    assert parallel.length_sorted(sp.csr_matrix((0, 0))).times(np.zeros(0)).shape == (0,)


@pytest.mark.parametrize("sorted_faster", [True, False])
def test_a_walk_keeps_the_faster_form_of_its_rows(sorted_faster: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """After `PLAIN_PRODUCTS` products with vectors a walk times both forms (here by a stand-in clock that
    makes one of them faster) and keeps the faster; its solves give the same floats before, during and after."""
    from engram.graph import parallel

    def timed(blocks: list[tuple[int, int, object]], x: np.ndarray) -> float:
        parallel.matvec(blocks, x)  # type: ignore[arg-type]
        is_sorted = isinstance(blocks[0][2], parallel.LengthSorted)
        return 1.0 if is_sorted == sorted_faster else 2.0

    monkeypatch.setattr(parallel, "timed_product", timed)
    rng = np.random.default_rng(9)
    adj, *_ = random_graph(rng, 1500, 6000)
    reset = rng.random(1500)
    monkeypatch.setattr(parallel, "PLAIN_PRODUCTS", 10**9)
    walk = symmetric_walk(adj)
    plain = solve_pagerank(walk, reset, 0.5, tol=1e-12)
    assert walk.vector_products.chosen is None
    monkeypatch.setattr(parallel, "PLAIN_PRODUCTS", 3)
    walk = symmetric_walk(adj)
    assert np.array_equal(solve_pagerank(walk, reset, 0.5, tol=1e-12), plain)  # chose after three products
    chosen = walk.vector_products.chosen
    assert chosen is not None and isinstance(chosen[0][2], parallel.LengthSorted) == sorted_faster
    assert np.array_equal(solve_pagerank(walk, reset, 0.5, tol=1e-12), plain)  # that form from the start
