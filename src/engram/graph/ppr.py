"""Personalized PageRank over a weighted undirected graph: pure functions over scipy sparse matrices."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

FloatArray = npt.NDArray[np.float64]


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
