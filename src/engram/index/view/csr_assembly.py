"""A patched view's CSR matrix put together (engram.index.view.edges): the rows a patch leaves alone copied from the
last view's matrix in runs of consecutive rows (slice copies, their columns renumbered), the rows it rebuilt
from their sorted entries; every entry written once, whichever thread writes it, so the matrix is the same to
the bit on any number of threads (tests/test_view_patch.py compares it with the built one)."""

from __future__ import annotations

import itertools
from functools import partial
from typing import cast

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.graph.parallel import MIN_WORK, THREADS, in_parallel
from engram.index.state.spare_arrays import Spares

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
MAX_RUNS = 4096  # a patch assembles its rows run by run (slice copies) up to this many runs, else by masks
PIECE = 1 << 18  # entries copied at a time: a run's column indices are remapped through a buffer that fits cache


def assemble(
    old: sp.csr_matrix,
    old_walk: FloatArray,
    remap: IntArray,
    old_of: IntArray,
    redo: BoolArray,
    keys: IntArray,
    data: FloatArray,
    n_new: int,
    spares: Spares,
) -> tuple[sp.csr_matrix, FloatArray, BoolArray, IntArray | None]:
    """The new CSR matrix: rows not rebuilt copied from `old` (columns remapped), rebuilt and new rows from the
    sorted `keys` and `data`; the old walk's values carried to the copied rows' entries (the others left
    unset); which new rows were copied, and the runs they come in (`_runs`; None when there were too many to
    copy run by run). The new arrays are written into memory of views no longer read (`spares`)."""
    copied = old_of >= 0  # by new row: copied as it was
    rebuilt = remap[np.flatnonzero(redo)]
    copied[rebuilt[rebuilt >= 0]] = False
    runs, key_rows = _runs(copied, old_of), keys // n_new
    new_lengths = _row_lengths(old.indptr, runs, copied, old_of, key_rows, n_new)
    nnz = int(new_lengths.sum())
    index = np.int32 if max(n_new, nnz) < 2**31 else np.int64  # scipy's own choice: it keeps these, uncopied
    indptr = cast(IntArray, spares.empty(n_new + 1, index))
    indptr[0] = 0
    np.cumsum(new_lengths, out=indptr[1:])
    indices = cast(npt.NDArray[np.integer], spares.empty(nnz, index))
    values, carried = cast(FloatArray, spares.empty(nnz, np.float64)), cast(FloatArray, spares.empty(nnz, np.float64))
    if len(runs) <= MAX_RUNS:
        columns, moved = keys % n_new, remap.astype(indices.dtype)  # copied rows hold no gone column

        def copy(pieces: list[tuple[int, int, int, bool]]) -> None:
            for a, b, at, was_copied in pieces:
                if was_copied:  # copied rows whose old rows follow each other too: a run of old entries
                    np.take(moved, old.indices[at : at + b - a], out=indices[a:b], mode="clip")
                    values[a:b] = old.data[at : at + b - a]
                    carried[a:b] = old_walk[at : at + b - a]
                else:
                    indices[a:b] = columns[at : at + b - a]
                    values[a:b] = data[at : at + b - a]

        in_parallel([partial(copy, group) for group in _pieces(runs, indptr, old.indptr, key_rows)])
        return _canonical(values, indices, indptr, n_new), carried, copied, runs
    source = np.repeat(~redo & (remap >= 0), np.diff(old.indptr))  # by old entry: in a copied row
    target = np.repeat(copied, new_lengths)  # by new entry: in a copied row
    indices[target] = remap[old.indices[source]]
    values[target] = old.data[source]
    carried[target] = old_walk[source]
    indices[~target] = keys % n_new
    values[~target] = data
    return _canonical(values, indices, indptr, n_new), carried, copied, None


def _row_lengths(
    old_indptr: npt.NDArray[np.integer], runs: IntArray, copied: BoolArray, old_of: IntArray, key_rows: IntArray, n: int
) -> IntArray:
    """Each new row's number of entries: a copied row's old one (run by run: slices, not a gather by row), a
    built row's keys (`key_rows`, sorted: the row of each key)."""
    lengths = np.zeros(n, dtype=np.int64)
    rows, counts = np.unique(key_rows, return_counts=True)
    lengths[rows] = counts
    if len(runs) <= MAX_RUNS:
        for start, end, was in runs[runs[:, 2] >= 0].tolist():
            lengths[start:end] = np.diff(old_indptr[was : was + end - start + 1])
    else:
        lengths[copied] = np.diff(old_indptr)[old_of[copied]]
    return lengths


def _pieces(
    runs: IntArray, indptr: IntArray, old_indptr: npt.NDArray[np.integer], key_rows: IntArray
) -> list[list[tuple[int, int, int, bool]]]:
    """The runs' entries as pieces of at most `PIECE` (new start, new end, source start, from the old matrix),
    in about `THREADS` groups of equal entries, one per thread: every entry is copied once, whichever thread
    copies it, so the result is the same to the bit."""
    pieces: list[tuple[int, int, int, bool]] = []
    for start, end, was in runs.tolist():
        a, b = int(indptr[start]), int(indptr[end])
        source = int(old_indptr[was]) if was >= 0 else int(np.searchsorted(key_rows, start))  # keys before it
        pieces.extend((lo, min(b, lo + PIECE), source + lo - a, was >= 0) for lo in range(a, b, PIECE))
    if not pieces:
        return [[]]
    total = int(indptr[-1])
    parts = 1 if total < MIN_WORK else THREADS
    ends = np.array([piece[1] for piece in pieces], dtype=np.int64)
    cuts = np.searchsorted(ends, np.linspace(0, total, parts + 1)[1:-1], side="left").tolist()
    bounds = [0, *cuts, len(pieces)]
    return [pieces[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _canonical(values: FloatArray, indices: npt.NDArray[np.integer], indptr: IntArray, n: int) -> sp.csr_matrix:
    """The assembled matrix, marked canonical (each row's columns sorted, no duplicates: it is built so, and
    tests/test_view_patch.py compares it with the built one) so that nothing checks every entry again."""
    matrix = sp.csr_matrix((values, indices, indptr), shape=(n, n))
    matrix.has_canonical_format = True
    return matrix


def _runs(copied: BoolArray, old_of: IntArray) -> IntArray:
    """(start, end, first old row or -1) of each run of new rows that are all copied from consecutive old rows
    or all built from keys: a patch after a small change has few, each one slice copy."""
    n = len(copied)
    if n == 0:
        return np.zeros((0, 3), dtype=np.int64)
    cut = np.ones(n, dtype=bool)
    cut[1:] = (copied[1:] != copied[:-1]) | (copied[1:] & (old_of[1:] != old_of[:-1] + 1))
    starts = np.flatnonzero(cut)
    ends = np.append(starts[1:], n)
    return np.column_stack([starts, ends, np.where(copied[starts], old_of[starts], -1)]).astype(np.int64)
