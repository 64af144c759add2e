"""Conjugate gradients for the symmetric PageRank system (I - damping S) y = b: pure functions over arrays.

`engram.graph.ppr.solve_pagerank` calls them. Deterministic: fixed-order sparse products and numpy's own
summation loops (no BLAS reductions), so the same data gives the same floats wherever it lies in memory. A
solve starts from y = b, or from an iterate and its residual (`Start`: what a forward push left,
`engram.graph.push`), whose arrays it then updates in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from engram.graph.parallel import RowChunks

FloatArray = npt.NDArray[np.float64]
Scalars: TypeAlias = "FloatArray | np.float64"  # one per column of a matrix, or one for a vector
Stop = Callable[[FloatArray, FloatArray, Scalars], bool]  # (iterate, residual, its squared norms) -> stop now
Start = tuple[FloatArray, FloatArray]  # an iterate y and its residual b - (I - damping S) y


def dots(a: FloatArray, b: FloatArray) -> FloatArray:
    """Dot products (one per column of a matrix) by numpy's own summation loop: single-threaded, the same
    bits for the same data wherever it lies in memory, unlike a threaded BLAS reduction."""
    out: FloatArray = np.asarray(np.einsum("i,i->" if a.ndim == 1 else "ij,ij->j", a, b))
    return out


def conjugate_gradients(
    matrix: Callable[[FloatArray], FloatArray],
    b: FloatArray,
    damping: float,
    tol: float,
    max_iter: int,
    stop: Stop | None = None,
    start: Start | None = None,
) -> FloatArray:
    """Solve (I - damping * matrix) y = b for each column of b, from y = b or from `start`; stops when every
    column's residual norm is below `tol` x its right-hand side's norm, or `stop(y, residual, its squared
    norms)` says so. In-place vector updates: one sparse product and a few passes over the vectors per
    iteration. A vector's scalars are numpy scalars, not 0-d arrays (the same floats, without a ufunc call with
    `out=` and `where=` for each)."""
    scratch = np.empty_like(b)
    if start is None:
        y: FloatArray = b.copy()
        residual = matrix(y)  # b - (y - damping S y) with y = b
        residual *= damping
    else:  # a start's arrays are the solve's own from here
        y, residual = start
    direction = residual.copy()
    rr = dots(residual, residual)[()]  # a scalar for a vector, one per column for a matrix
    limit = (tol**2) * dots(b, b)[()]
    for _ in range(max_iter):
        if np.all(rr <= limit) or (stop is not None and stop(y, residual, rr)):
            break
        product = matrix(direction)
        product *= -damping
        product += direction  # (I - damping S) direction
        alpha = _ratio(rr, dots(direction, product)[()])
        np.multiply(direction, alpha, out=scratch)
        y += scratch
        np.multiply(product, alpha, out=scratch)
        residual -= scratch
        fresh = dots(residual, residual)[()]
        direction *= _ratio(fresh, rr)
        direction += residual
        rr = fresh
    return y


def _ratio(top: Scalars, bottom: Scalars) -> Scalars:
    """top / bottom where bottom > 0, else 0 (per column)."""
    if isinstance(top, np.ndarray):
        out: FloatArray = np.divide(top, bottom, out=np.zeros_like(top), where=bottom > 0)
        return out
    below = float(bottom)
    quotient: np.float64 = np.float64(float(top) / below if below > 0 else 0.0)
    return quotient


def chunked_conjugate_gradients(
    chunks: RowChunks,
    b: FloatArray,
    damping: float,
    tol: float,
    max_iter: int,
    stop: Stop | None = None,
    start: Start | None = None,
) -> FloatArray:
    """`conjugate_gradients` for a large graph: each iteration is three steps over the chunks of rows (the
    sparse product with the update that needs it, then the solution and residual, then the direction), each
    chunk's vector work done while its rows are in cache and the chunks on all threads. The floats are those
    of one thread: every chunk's work and partial dot product is the same whichever thread runs it."""
    y: FloatArray = b.copy() if start is None else start[0]  # a start's arrays are the solve's own from here
    residual = np.empty_like(b) if start is None else start[1]
    direction, product = np.empty_like(b), np.empty_like(b)
    parts = np.zeros((len(chunks.parts), *b.shape[1:]))
    scale: list[FloatArray] = []  # this step's alpha or beta, set before the step runs

    def first(c: int) -> None:  # residual = damping S b (y = b), the first direction
        a, e, rows = chunks.parts[c]
        r = residual[a:e]
        r[...] = rows @ y
        r *= damping
        direction[a:e] = r
        parts[c] = dots(r, r)

    def warm(c: int) -> None:  # the given residual, the first direction
        a, e, _ = chunks.parts[c]
        r = residual[a:e]
        direction[a:e] = r
        parts[c] = dots(r, r)

    def step_product(c: int) -> None:  # product = (I - damping S) direction, and its curvature
        a, e, rows = chunks.parts[c]
        p = product[a:e]
        p[...] = rows @ direction
        p *= -damping
        p += direction[a:e]
        parts[c] = dots(direction[a:e], p)

    def step_solution(c: int) -> None:  # y += alpha direction, residual -= alpha product
        a, e, _ = chunks.parts[c]
        y[a:e] += direction[a:e] * scale[0]
        r = residual[a:e]
        r -= product[a:e] * scale[0]
        parts[c] = dots(r, r)

    def step_direction(c: int) -> None:  # direction = residual + beta direction
        a, e, _ = chunks.parts[c]
        d = direction[a:e]
        d *= scale[0]
        d += residual[a:e]

    chunks.run(first if start is None else warm)
    rr = parts.sum(axis=0)
    limit = (tol**2) * dots(b, b)
    for _ in range(max_iter):
        if np.all(rr <= limit) or (stop is not None and stop(y, residual, rr)):
            break
        chunks.run(step_product)
        curvature = parts.sum(axis=0)
        scale[:] = [np.divide(rr, curvature, out=np.zeros_like(rr), where=curvature > 0)]
        chunks.run(step_solution)
        fresh = parts.sum(axis=0)
        scale[:] = [np.divide(fresh, rr, out=np.zeros_like(rr), where=rr > 0)]
        chunks.run(step_direction)
        rr = fresh
    return y
