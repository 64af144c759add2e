"""Entries of chosen rows of a CSR matrix, gathered without a pass over the whole matrix: pure functions."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def row_entries(indptr: npt.NDArray[np.integer], rows: IntArray) -> tuple[IntArray, IntArray]:
    """Positions of every entry of `rows` (row after row) and where each row's run starts among them."""
    lengths = (indptr[rows + 1] - indptr[rows]).astype(np.int64)
    starts = np.cumsum(lengths) - lengths
    at: IntArray = np.repeat(indptr[rows].astype(np.int64) - starts, lengths) + np.arange(int(lengths.sum()))
    return at, starts
