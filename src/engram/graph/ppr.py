"""Personalized PageRank over a weighted undirected graph: pure functions over scipy sparse matrices."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.graph import push
from engram.graph.certify import TopK, exact_total, node_bounds, ranking_settled, top_unsettled
from engram.graph.cg import Start, Stop, chunked_conjugate_gradients, conjugate_gradients, dots
from engram.graph.csr import row_entries
from engram.graph.parallel import RowChunks, VectorProducts, matvec, row_blocks, row_chunks

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Relative residual at which `solve_pagerank` stops: the tolerance igraph hands its PRPACK solver, which the
# reference HippoRAG implementation ranks with. Scores are then exact to ~1e-10 of the largest, far below
# any gap a ranking resolves (the shared MuSiQue top-20 rankings are the same as at 1e-13), in 17 sparse
# products per query on that graph instead of 22.
PPR_TOL = 1e-10


def walk_operator(adjacency: sp.csr_matrix) -> sp.csr_matrix:
    """Transpose of the row-stochastic transition matrix: column j holds the probabilities of stepping from
    node j to each neighbour (edge weight over j's weighted degree). Nodes without edges (dangling) get an
    empty column; `personalized_pagerank` sends their mass back to the reset distribution."""
    adjacency = sp.csr_matrix(adjacency, dtype=np.float64, copy=True)
    adjacency.sum_duplicates()  # canonical form: sorted column indices, so sums run in one fixed order
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    inverse = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    transition = sp.diags(inverse) @ adjacency
    operator = sp.csr_matrix(transition.T)
    operator.sum_duplicates()
    return operator


def dangling_nodes(operator: sp.csr_matrix) -> npt.NDArray[np.bool_]:
    """Nodes with no outgoing probability (empty columns of the walk operator)."""
    mask: npt.NDArray[np.bool_] = np.asarray(operator.sum(axis=0)).ravel() == 0
    return mask


def personalized_pagerank(
    operator: sp.csr_matrix,
    reset: npt.ArrayLike,
    damping: float = 0.5,
    tol: float = 1e-12,
    max_iter: int = 200,
    dangling: npt.NDArray[np.bool_] | None = None,
) -> FloatArray:
    """Stationary distribution of a walk that follows an edge with probability `damping` and jumps to a node
    drawn from `reset` otherwise (a dangling node always jumps).

    `operator` comes from `walk_operator`. `reset` is a non-negative vector of length n, or an (n, q) matrix
    for q queries at once; each column is normalised to sum 1. Returns the same shape, columns summing to 1.
    `dangling` (nodes without edges) may be passed precomputed (`dangling_nodes(operator)`).
    Matches igraph's PRPACK personalized PageRank (dangling mass follows the reset distribution).
    """
    if not 0.0 <= damping < 1.0:
        raise ValueError("damping must be in [0, 1)")
    r = np.array(reset, dtype=np.float64)
    single = r.ndim == 1
    if single:
        r = r[:, None]
    if r.shape[0] != operator.shape[0] or np.any(r < 0) or not np.all(np.isfinite(r)):
        raise ValueError("reset must be finite, non-negative and have one row per node")
    totals = r.sum(axis=0)
    if np.any(totals <= 0):
        raise ValueError("every reset column needs positive mass")
    r = r / totals
    if dangling is None:
        dangling = dangling_nodes(operator)
    p = r.copy()
    for _ in range(max_iter):
        lost = p[dangling].sum(axis=0) if dangling.any() else 0.0
        nxt = (1.0 - damping) * r + damping * (operator @ p + r * lost)
        delta = float(np.abs(nxt - p).sum(axis=0).max())
        p = nxt
        if delta < tol:
            break
    out: FloatArray = p[:, 0] if single else p
    return out


@dataclass(frozen=True)
class SymmetricWalk:
    """The walk of an undirected graph in symmetric form, for `solve_pagerank`: S = D^-1/2 A D^-1/2 (D the
    weighted degrees), the square roots of the degrees, and the dangling (edgeless) nodes. Derived once per
    graph (`symmetric_walk`); each query then costs one sparse product per iteration."""

    matrix: sp.csr_matrix
    root: FloatArray  # sqrt(degree); 0 for dangling nodes
    inverse_root: FloatArray  # 1 / sqrt(degree); 0 for dangling nodes
    dangling: npt.NDArray[np.bool_]
    blocks: list[tuple[int, int, sp.csr_matrix]]  # the matrix in row blocks, multiplied in parallel

    def product(self, x: FloatArray) -> FloatArray:
        """`matrix @ x`, row blocks in parallel (the same floats as one thread); a vector's through
        `vector_products` (its rows sorted by length where that runs faster: the same floats again)."""
        return self.vector_products(x) if x.ndim == 1 else matvec(self.blocks, x)

    @cached_property
    def vector_products(self) -> VectorProducts:
        """How this walk multiplies vectors (`parallel.VectorProducts`)."""
        return VectorProducts(self.blocks)

    @property
    def size(self) -> int:
        return int(self.matrix.shape[0])

    def row_norms(self, start: int) -> FloatArray:
        """The 2-norms of the matrix's rows from `start` on (kept for the last `start` asked: a view asks for
        its passage rows at every query)."""
        kept = self.__dict__.get("_row_norms")
        if kept is None or kept[0] != start:
            indptr = self.matrix.indptr
            squares = np.square(self.matrix.data[indptr[start] :])
            sums = np.zeros(self.size - start)
            filled = np.diff(indptr[start:]) > 0
            if filled.any():  # one reduceat segment per non-empty row
                sums[filled] = np.add.reduceat(squares, (indptr[start:-1] - indptr[start])[filled])
            kept = (start, np.sqrt(sums))
            self.__dict__["_row_norms"] = kept
        norms: FloatArray = kept[1]
        return norms

    @cached_property
    def dangling_rows(self) -> IntArray:
        """The dangling nodes' rows, sorted: a solve reads their reset weights at each query, and gathering a
        few rows costs far less than masking every node."""
        rows: IntArray = np.flatnonzero(self.dangling)
        return rows

    @cached_property
    def chunks(self) -> RowChunks:
        """The matrix in fixed chunks of rows, for the solver's fused steps on a large graph."""
        return row_chunks(self.matrix)


def symmetric_walk(adjacency: sp.csr_matrix) -> SymmetricWalk:
    """`SymmetricWalk` of a symmetric weighted adjacency matrix (duplicates summed, column indices sorted, so
    the products sum in one fixed order)."""
    adjacency = sp.csr_matrix(adjacency, dtype=np.float64)  # the caller's matrix is read, never changed
    if not adjacency.has_canonical_format:
        adjacency = adjacency.copy()
        adjacency.sum_duplicates()
    root, inverse_root, dangling = _roots(np.asarray(adjacency.sum(axis=1)).ravel())
    rows = np.repeat(inverse_root, np.diff(adjacency.indptr))
    data = adjacency.data * (rows * inverse_root[adjacency.indices])
    return _walk(adjacency, data, root, inverse_root, dangling)


def patched_walk(
    adjacency: sp.csr_matrix,
    old: SymmetricWalk,
    old_of: IntArray,
    copied: npt.NDArray[np.bool_],
    carried: FloatArray,
    runs: IntArray | None = None,
) -> SymmetricWalk:
    """`symmetric_walk(adjacency)`, to the bit, from the previous graph's walk `old` when most rows are unchanged:
    new row i with `copied[i]` holds old row `old_of[i]`'s entries as they were (columns renumbered), and
    `carried` holds the old walk's values at those entries (anything at the others). A copied row keeps its
    degree; only the other rows and the neighbours of rows whose degree moved are scaled again, each entry by
    the same products as a full derivation: O(nodes + their entries), not O(edges). `runs` (start, end, first
    old row, or -1 for rows not copied), when given, are the copied rows as runs of consecutive old rows: their
    scaling is then carried by slice copies instead of masks over every node."""
    indptr, indices, data = adjacency.indptr, adjacency.indices, adjacency.data
    lengths = np.diff(indptr).astype(np.int64)
    n, fresh = len(lengths), np.flatnonzero(~copied)
    root, inverse_root, dangling = np.empty(n), np.empty(n), np.empty(n, dtype=bool)
    if runs is not None:
        for a, b, was in runs[runs[:, 2] >= 0].tolist():
            root[a:b], inverse_root[a:b] = old.root[was : was + b - a], old.inverse_root[was : was + b - a]
            dangling[a:b] = old.dangling[was : was + b - a]
    else:
        kept = old_of[copied]
        root[copied], inverse_root[copied] = old.root[kept], old.inverse_root[kept]
        dangling[copied] = old.dangling[kept]
    at, starts = row_entries(indptr, fresh)
    degree = np.zeros(len(fresh), dtype=np.float64)
    filled = lengths[fresh] > 0
    if filled.any():  # the row sums as scipy's sum(axis=1) takes them: one reduceat segment per non-empty row
        degree[filled] = np.add.reduceat(data[at], starts[filled])
    root[fresh], inverse_root[fresh], dangling[fresh] = _roots(degree)
    was = old_of[fresh]
    same = was >= 0
    same[same] = inverse_root[fresh[same]] == old.inverse_root[was[same]]
    moved = fresh[~same]  # new rows and rows whose degree moved
    again = np.zeros(n, dtype=bool)
    again[fresh] = True
    again[indices[row_entries(indptr, moved)[0]]] = True  # their neighbours' entries in the moved columns
    rows = np.flatnonzero(again)
    at = row_entries(indptr, rows)[0]
    scale = np.repeat(inverse_root[rows], lengths[rows])
    carried[at] = data[at] * (scale * inverse_root[indices[at]])
    return _walk(adjacency, carried, root, inverse_root, dangling)


def restored_walk(
    adjacency: sp.csr_matrix,
    data: FloatArray,
    root: FloatArray,
    inverse_root: FloatArray,
    dangling: npt.NDArray[np.bool_],
) -> SymmetricWalk:
    """The `SymmetricWalk` of `adjacency` from its values and scaling as `symmetric_walk` computed them earlier
    (saved with a memory's state: engram.index.view.saved_walk), without computing them again."""
    return _walk(adjacency, data, root, inverse_root, dangling)


def _roots(degree: FloatArray) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """(sqrt(degree), 1 / sqrt(degree), dangling) with 0 for the dangling (edgeless) nodes."""
    dangling = degree <= 0
    root = np.sqrt(np.where(dangling, 0.0, degree))
    inverse_root = np.divide(1.0, root, out=np.zeros_like(root), where=~dangling)
    return root, inverse_root, dangling


def _walk(
    adjacency: sp.csr_matrix, data: FloatArray, root: FloatArray, inverse: FloatArray, dangling: npt.NDArray[np.bool_]
) -> SymmetricWalk:
    shape = adjacency.shape  # the same pattern: its index arrays are shared, not copied
    matrix = sp.csr_matrix((data, adjacency.indices, adjacency.indptr), shape=shape, copy=False)
    return SymmetricWalk(matrix, root, inverse, dangling, row_blocks(matrix))


def solve_pagerank(
    walk: SymmetricWalk,
    reset: npt.ArrayLike,
    damping: float = 0.5,
    tol: float = PPR_TOL,
    max_iter: int = 200,
    top: TopK | None = None,
    push_budget: float | None = None,
    support: IntArray | None = None,
) -> FloatArray:
    """Personalized PageRank as `personalized_pagerank` defines it (dangling mass follows the reset
    distribution), solved as a linear system instead of by power iteration.

    With M = A D^-1 the walk, the PageRank vector is x / sum(x) for x solving (I - damping M) x = reset (a
    dangling node keeps x = its reset). Writing x = D^1/2 y makes the system symmetric positive definite,
    (I - damping S) y = D^-1/2 reset, with eigenvalues in [1 - damping, 1 + damping] (condition number 3 at
    damping 0.5), so conjugate gradients reach `tol` (relative residual) in about half the sparse products
    power iteration needs. `reset` is a vector or an (n, q) matrix (q queries: solved together, or with `top` each
    on its own as a vector); columns are normalised. Deterministic: fixed-order sparse products and numpy's
    pairwise sums, no BLAS reductions.

    With `top`, the solve stops as soon as every column's best `top.k` nodes from `top.start` on are settled
    (`engram.graph.certify`): their order is then the exact solution's, and each of their masses within 0.1 % of
    it (`certify.SCORE_TOLERANCE`). Each column is first pushed from its reset (`engram.graph.push`), which
    settles a concentrated reset's top without a pass over the graph; a column it does not settle within its
    budget goes on by conjugate gradients from there, stopped the same way (bench/bench_certify.py).
    `push_budget` is that budget (default `push.PUSH_BUDGET` on a walk of at least `push.MIN_NONZEROS`
    non-zeros, else 0); 0 solves by conjugate gradients alone.

    `support`, for a vector `reset`: the sorted, distinct nodes outside which the caller knows it is zero (a few seeds
    and the passages: engram.index.view.graph_index). The reset's checks, its normalisation and the push then read those
    entries alone, not every node."""
    if not 0.0 <= damping < 1.0:
        raise ValueError("damping must be in [0, 1)")
    if top is not None and np.ndim(reset) == 2:  # each column on its own, as a vector, checked as one (`_columns`)
        return _columns(walk, np.asarray(reset, dtype=np.float64), damping, tol, max_iter, top, push_budget)
    r = _checked_reset(reset, walk.size, support)
    budget = push_budget
    if budget is None:
        budget = push.PUSH_BUDGET if walk.matrix.nnz >= push.MIN_NONZEROS else 0.0
    if top is not None and budget > 0:
        return _solve_top(walk, r, damping, tol, max_iter, top, budget, support)
    return _solve(walk, r, damping, tol, max_iter, top)


def _solve(
    walk: SymmetricWalk,
    r: FloatArray,
    damping: float,
    tol: float,
    max_iter: int,
    top: TopK | None = None,
    start: Start | None = None,
) -> FloatArray:
    """Conjugate gradients on the normalised reset `r`, from y = b or from `start`, stopped at `tol` or, with
    `top`, once the top is settled; the masses."""
    single = r.ndim == 1
    b = r * (walk.inverse_root if single else walk.inverse_root[:, None])
    fired: list[bool] = []
    stop = None if top is None else _settled_stop(walk, r, b, damping, top, fired)
    if len(walk.chunks.parts) > 1:
        y = chunked_conjugate_gradients(walk.chunks, b, damping, tol, max_iter, stop, start)
    else:
        y = conjugate_gradients(walk.product, b, damping, tol, max_iter, stop, start)
    x = y * (walk.root if single else walk.root[:, None])
    x[walk.dangling_rows] = r[walk.dangling_rows]
    if not fired:
        out: FloatArray = x / x.sum(axis=0)
    else:  # a stopped solve divides by the exact total (the iterate's own sum is off by up to the whole bound)
        total = exact_total(r, walk.dangling_rows, damping)
        out = x / (total[0] if single else total)
    return out


def _solve_top(
    walk: SymmetricWalk,
    r: FloatArray,
    damping: float,
    tol: float,
    max_iter: int,
    top: TopK,
    budget: float,
    support: IntArray | None = None,
) -> FloatArray:
    """The vector `r` pushed from its reset (`engram.graph.push`, from `support` when given); a top the push did
    not settle within its budget is solved by conjugate gradients from where the push stopped."""
    pushed = push.push_top(walk, r, damping, top, budget, support)
    if pushed.masses is not None:
        return pushed.masses
    return _solve(walk, r, damping, tol, max_iter, top, (pushed.y, pushed.residual))


def _columns(
    walk: SymmetricWalk,
    reset: FloatArray,
    damping: float,
    tol: float,
    max_iter: int,
    top: TopK,
    push_budget: float | None,
) -> FloatArray:
    """`solve_pagerank` of each column of `reset` as a vector: each stops at its own settled iterate, and vectors
    beat one block of columns on every memory measured (bench/bench_batch.py), so a column's masses are the
    same floats as its vector's."""
    out = np.empty(reset.shape, dtype=np.float64)
    for column in range(reset.shape[1]):
        vector = np.ascontiguousarray(reset[:, column])
        out[:, column] = solve_pagerank(walk, vector, damping, tol, max_iter, top, push_budget)
    return out


def _settled_stop(
    walk: SymmetricWalk, reset: FloatArray, b: FloatArray, damping: float, top: TopK, fired: list[bool]
) -> Stop:
    """Whether an iterate settles the top of the ranking (`engram.graph.certify`); notes in `fired` that it
    did (a solve that ends at its tolerance instead is the same as one without `top`). A vector's iterate is
    first refused at its k largest values alone (`top_unsettled`), as nearly every unsettled iterate is."""
    rhs = np.sqrt(dots(b, b))
    norms = walk.row_norms(top.start)
    roots = walk.root[top.start :]
    still = np.flatnonzero(walk.dangling[top.start :])  # exact: their reset weights

    def stop(y: FloatArray, residual: FloatArray, rr: FloatArray | np.float64) -> bool:
        residual_norm = np.sqrt(np.maximum(rr, 0.0))
        if y.ndim == 1:
            values = y[top.start :] * roots
            values[still] = reset[top.start :][still]
            tail = residual[top.start :]
            if top_unsettled(values, roots, tail, norms, float(residual_norm), float(rhs), damping, top.rel, top.k):
                return False
        bound = node_bounds(residual[top.start :], norms, np.asarray(residual_norm), rhs, damping)
        done = ranking_settled(y, walk.root, reset, walk.dangling, bound, top)
        if done:
            fired.append(True)
        return done

    return stop


def _checked_reset(reset: npt.ArrayLike, n: int, support: IntArray | None = None) -> FloatArray:
    r = np.asarray(reset, dtype=np.float64)
    if r.ndim not in (1, 2) or r.shape[0] != n:
        raise ValueError("reset must be finite, non-negative and have one row per node")
    if support is not None and r.ndim == 1:  # zero elsewhere: the entries of `support` alone are checked
        values = r[support]
        total = float(values.sum())
        if not np.isfinite(total) or (values.size and float(values.min()) < 0):
            raise ValueError("reset must be finite, non-negative and have one row per node")
        if total <= 0:
            raise ValueError("every reset column needs positive mass")
        out: FloatArray = np.zeros(n)
        out[support] = values / total
        return out
    totals = r.sum(axis=0)  # a NaN or an infinity makes its column's total non-finite
    if not np.all(np.isfinite(totals)) or (r.size and float(r.min()) < 0):
        raise ValueError("reset must be finite, non-negative and have one row per node")
    if np.any(totals <= 0):
        raise ValueError("every reset column needs positive mass")
    normalised: FloatArray = r / totals
    return normalised
