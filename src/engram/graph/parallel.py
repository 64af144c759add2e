"""Row-parallel products that give the same floats as one thread: each output row is computed by the same
loop whichever thread runs it (a sparse row's sum in CSR order; a vector row's dot by one kernel, simsimd's
or numpy's einsum, `row_dots`), so splitting the rows into blocks changes only the wall time. scipy's sparse
products and numpy's einsum release the GIL, so a small thread pool uses the machine's cores (2 here) for a
large memory's queries. `ENGRAM_THREADS=1` keeps them on the calling thread (a machine whose cores are busy
gains nothing); `ENGRAM_DOT_KERNEL=einsum` scores rows by numpy's loop even where simsimd is installed."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram import optional


def _threads() -> int:
    """ENGRAM_THREADS (a positive whole number), else the cores this process may use, at most 4; 1 runs all
    on the caller's thread."""
    value = os.environ.get("ENGRAM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(4, usable))


THREADS = _threads()
T = TypeVar("T")
MIN_WORK = 200_000  # non-zeros (or vector elements / 64) below which one thread does it all
DOT_KERNEL = os.environ.get("ENGRAM_DOT_KERNEL", "simsimd").strip() or "simsimd"  # "einsum": numpy's loop
CHUNK_ROWS = 1 << 17  # rows per chunk of `row_chunks`: fixed, so per-chunk sums do not depend on the threads

_pool: list[ThreadPoolExecutor] = []
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="engram-rows"))
        return _pool[0]


def _bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, rows, parts + 1).astype(np.int64).tolist()
    return [(a, b) for a, b in itertools.pairwise(edges) if b > a]


def row_ranges(rows: int, parts: int | None = None) -> list[tuple[int, int]]:
    """Rows 0..`rows`-1 cut into `parts` (default `THREADS`) ranges of about equal size, none empty."""
    return _bounds(rows, THREADS if parts is None else parts)


def in_parallel(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Each call's result, in order: all but the first on the pool, the first on the caller's thread (for
    work that releases the GIL: numpy, scipy and faiss loops); all on the caller's thread with one thread."""
    if THREADS == 1:
        return [call() for call in calls]
    futures = [_executor().submit(call) for call in calls[1:]]
    first = [calls[0]()] if calls else []
    return first + [future.result() for future in futures]


def row_blocks(matrix: sp.csr_matrix) -> list[tuple[int, int, sp.csr_matrix]]:
    """The matrix cut into about `THREADS` blocks of rows of equal non-zeros (one block when small)."""
    rows = int(matrix.shape[0])
    if THREADS == 1 or matrix.nnz < MIN_WORK or rows < THREADS:
        return [(0, rows, matrix)]
    cuts = np.searchsorted(matrix.indptr, np.linspace(0, matrix.nnz, THREADS + 1)[1:-1]).tolist()
    edges = [0, *cuts, rows]
    return [(a, b, _rows_view(matrix, a, b)) for a, b in itertools.pairwise(edges) if b > a]


def _rows_view(matrix: sp.csr_matrix, a: int, b: int) -> sp.csr_matrix:
    """Rows a..b-1 of a CSR matrix sharing its data and column arrays (slicing, and the constructor, which
    copies a small view of a large array, would copy them): the arrays are set on an empty matrix."""
    start, end = int(matrix.indptr[a]), int(matrix.indptr[b])
    block = sp.csr_matrix((b - a, matrix.shape[1]), dtype=matrix.dtype)
    block.data, block.indices = matrix.data[start:end], matrix.indices[start:end]
    block.indptr = matrix.indptr[a : b + 1] - start
    return block


@dataclass(frozen=True)
class LengthSorted:
    """A CSR matrix's rows reordered by their number of entries (a stable sort), each row's entries in their own
    order, and where each row went. scipy's product loop then meets rows of one length in runs, so the end of
    its inner loop is predicted instead of missed at nearly every row: where that loop is bound by its branches
    (rows of 2 to hundreds of entries, mixed, in cache) a product with a vector takes a fifth to a half less
    time, elsewhere no less or more (`VectorProducts` decides; bench/README.md), and each row's sum is the same
    floats (the same products added in the same order). Not for an (n, q) matrix of vectors: there the loop
    over the q columns dominates and the sorted rows are no faster."""

    matrix: sp.csr_matrix
    place: npt.NDArray[np.int64]  # row i of the original matrix is row place[i] of `matrix`

    def times(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The original matrix @ x, row for row."""
        out: npt.NDArray[np.float64] = np.take(self.matrix @ x, self.place, axis=0)
        return out


def length_sorted(matrix: sp.csr_matrix) -> LengthSorted:
    """`LengthSorted` of a CSR matrix (a copy of its values and column indices, in the new row order)."""
    lengths = np.diff(matrix.indptr)
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = lengths[order]
    indptr = np.zeros(len(order) + 1, dtype=matrix.indptr.dtype)
    np.cumsum(sorted_lengths, out=indptr[1:])
    shift = (matrix.indptr[:-1][order] - indptr[:-1]).astype(matrix.indptr.dtype, copy=False)
    entries = np.repeat(shift, sorted_lengths) + np.arange(matrix.nnz, dtype=matrix.indptr.dtype)
    rows = sp.csr_matrix((matrix.data[entries], matrix.indices[entries], indptr), shape=matrix.shape)
    place = np.empty(len(order), dtype=np.int64)
    place[order] = np.arange(len(order))
    return LengthSorted(rows, place)


Block: TypeAlias = "sp.csr_matrix | LengthSorted"
PLAIN_PRODUCTS = 32  # products with vectors a matrix makes before `VectorProducts` tries its rows sorted
TRIALS = 3  # products each way, alternately, when it does


class VectorProducts:
    """Products of one matrix (in `row_blocks`) with vectors, through its rows as stored or through its rows
    sorted by length (`LengthSorted`), whichever this machine runs faster: the same floats either way. Sorted
    rows pay off where scipy's loop is bound by its branches (engram's MuSiQue graph, 18k nodes: a fifth off
    each product) and gain nothing or lose where it is bound by memory (bench_scale's 3k and 10k memories), so
    after `PLAIN_PRODUCTS` products (a walk that serves a query or two, one after each change of a memory, never
    gets there) a matrix in one block times `TRIALS` products each way and keeps the faster. Threads may race
    on the count or the trial; either way each product is the same floats."""

    def __init__(self, blocks: list[tuple[int, int, sp.csr_matrix]]) -> None:
        self.blocks = blocks
        self.made = 0
        self.chosen: Sequence[tuple[int, int, Block]] | None = None  # None until the trial

    def __call__(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if self.chosen is None:
            self.made += 1
            if self.made > PLAIN_PRODUCTS and len(self.blocks) == 1:
                self.chosen = _faster(self.blocks, x)
        return matvec(self.blocks if self.chosen is None else self.chosen, x)


def _faster(
    blocks: list[tuple[int, int, sp.csr_matrix]], x: npt.NDArray[np.float64]
) -> Sequence[tuple[int, int, Block]]:
    """`blocks` or their rows sorted by length, whichever multiplies `x` faster (the least of `TRIALS` each)."""
    sorted_rows: list[tuple[int, int, Block]] = [(a, b, length_sorted(block)) for a, b, block in blocks]
    plain, by_length = float("inf"), float("inf")
    for _ in range(TRIALS):
        plain = min(plain, timed_product(blocks, x))
        by_length = min(by_length, timed_product(sorted_rows, x))
    return sorted_rows if by_length < plain else blocks


def timed_product(blocks: Sequence[tuple[int, int, Block]], x: npt.NDArray[np.float64]) -> float:
    """Seconds one `matvec` takes."""
    start = time.perf_counter()
    matvec(blocks, x)
    return time.perf_counter() - start


def _times(block: Block, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if isinstance(block, LengthSorted):
        return block.times(x)
    out: npt.NDArray[np.float64] = block @ x
    return out


def matvec(blocks: Sequence[tuple[int, int, Block]], x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """`matrix @ x` (x a vector or an (n, q) matrix) from `row_blocks(matrix)` (or their `length_sorted`
    forms, for a vector), the blocks in parallel."""
    if len(blocks) == 1:
        return _times(blocks[0][2], x)
    result = np.empty((blocks[-1][1], *x.shape[1:]), dtype=np.float64)
    futures: list[tuple[int, int, Future[npt.NDArray[np.float64]]]] = [
        (a, b, _executor().submit(_times, block, x)) for a, b, block in blocks
    ]
    for a, b, future in futures:
        result[a:b] = future.result()
    return result


def row_dots(vectors: npt.NDArray[np.float32], vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """`vectors @ vector` in row blocks, one per thread, each row's dot by one kernel whatever its position:
    simsimd's (the `ann` extra; SIMD float32 dots, faster than numpy's loop on a 100k-passage table,
    bench/README.md) when installed, else numpy's einsum loop. Either gives the same float for a row at any
    position, block or thread count; the two kernels may differ in the last bit, so one process uses one."""
    parts = THREADS if vectors.size >= 64 * MIN_WORK else 1
    kernel = dot_kernel()
    if kernel is not None and len(vectors) and _fits_kernel(vectors, vector):
        return kernel_dots(kernel, vector, vectors, parts)
    out = np.empty(len(vectors), dtype=np.float32)
    bounds = _bounds(len(vectors), parts)
    if len(bounds) <= 1:
        np.einsum("ij,j->i", vectors, vector, out=out)
        return out
    futures = [_executor().submit(np.einsum, "ij,j->i", vectors[a:b], vector, out=out[a:b]) for a, b in bounds]
    for future in futures:
        future.result()
    return out


def dot_kernel() -> Any:
    """The simsimd module when installed and `DOT_KERNEL` is "simsimd" (else None: numpy's einsum)."""
    if DOT_KERNEL != "simsimd":
        return None
    return optional.module("simsimd")


def kernel_dots(kernel: Any, vector: npt.NDArray[Any], rows: npt.NDArray[Any], threads: int) -> npt.NDArray[np.float32]:
    """simsimd's `cdist` dot of `vector` with each of `rows` (float32 or int8), as float32 (`out_dtype`: the same
    floats as its `out=` form). Never its `out=` form: simsimd 6.5 takes away one reference to None at every such
    call, and Python (before 3.12) aborts the process when None's count reaches zero ("Fatal Python error:
    none_dealloc"), after about 15,000 queries of a MuSiQue memory (bench/soak_queries.py, tests/test_coded.py)."""
    result = kernel.cdist(vector[None], rows, metric="dot", threads=threads, out_dtype="float32")
    out: npt.NDArray[np.float32] = np.asarray(result, dtype=np.float32).reshape(-1)
    return out


def _fits_kernel(vectors: npt.NDArray[np.float32], vector: npt.NDArray[np.float32]) -> bool:
    """Whether simsimd takes the operands as they are: float32, rows contiguous, a 1-d query of their width."""
    return (
        vectors.ndim == 2
        and vectors.dtype == np.float32
        and vector.dtype == np.float32
        and vector.ndim == 1
        and vectors.shape[1] == vector.shape[0] > 0
        and vectors.strides[1] == 4
        and vector.strides[0] == 4
    )


@dataclass(frozen=True)
class RowChunks:
    """A matrix in chunks of `CHUNK_ROWS` rows (`parts`: first row, end row, the rows as a view), and the chunks
    split into about `THREADS` runs of equal non-zeros (`groups`), one per thread."""

    parts: list[tuple[int, int, sp.csr_matrix]]
    groups: list[range]

    def run(self, work: Callable[[int], None]) -> None:
        """`work(c)` for every chunk c, each group's chunks in order on one thread (the caller runs the first):
        a step that touches each chunk's rows once, while they are in cache, on all threads."""
        futures = [_executor().submit(_each, work, group) for group in self.groups[1:]]
        _each(work, self.groups[0])
        for future in futures:
            future.result()


def _each(work: Callable[[int], None], chunks: range) -> None:
    for chunk in chunks:
        work(chunk)


def row_chunks(matrix: sp.csr_matrix) -> RowChunks:
    """`RowChunks` of a CSR matrix (views: its arrays are shared)."""
    rows = int(matrix.shape[0])
    parts = [
        (a, min(rows, a + CHUNK_ROWS), _rows_view(matrix, a, min(rows, a + CHUNK_ROWS)))
        for a in range(0, rows, CHUNK_ROWS)
    ]
    work = np.cumsum([part[2].nnz + (part[1] - part[0]) for part in parts])
    cuts = np.searchsorted(work, np.linspace(0, int(work[-1]) if len(work) else 0, THREADS + 1)[1:-1]).tolist()
    edges = [0, *cuts, len(parts)]
    groups = [range(a, b) for a, b in itertools.pairwise(edges) if b > a] or [range(0)]
    return RowChunks(parts, groups)
