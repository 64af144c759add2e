"""Vectors stored as 8 bits a component, each row with its own scale: the narrowest type a memory stores fact
vectors in (`graph.vector_precision = "int8"`, docs/format.md "Vector precision").

A stored row is `dim` int8 codes followed by 4 bytes, the row's scale as a little-endian float32: one int8
matrix of `dim + 4` columns, so snapshot parts, spilled files and row reads treat it as any other matrix. A row
v is coded as c = rint(127 v / max |v_j|) and read back as the float32 products c_j x s with s = 1 / ||c||:
length 1 (to float32 rounding), and a function of the row alone, so a memory built in one go and one built
change by change hold the same values, as with float16. The codes keep the row's direction to about 1e-3 of a
cosine (bench/vector_precision.py measures what that changes).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

PACKED = np.dtype(np.int8)  # the dtype of a packed matrix
SCALE_BYTES = 4  # the row's float32 scale, after its codes
LEVELS = 127  # codes lie in -127..127
SLICE_ROWS = 16_384  # rows coded at a time

Vectors = npt.NDArray[np.float32]


def packed_width(dim: int) -> int:
    """Columns of a packed matrix of `dim`-dimensional rows."""
    return dim + SCALE_BYTES


def is_packed(rows: npt.NDArray[np.generic]) -> bool:
    return rows.dtype == PACKED


def pack(rows: npt.ArrayLike) -> npt.NDArray[np.int8]:
    """Float rows (n x dim, or one row) as packed rows (n x dim + 4): codes, then the scale's bytes. Coded
    `SLICE_ROWS` rows at a time, so a large append's temporaries stay small."""
    wide = np.asarray(rows, dtype=np.float32)
    flat = wide.reshape(-1, wide.shape[-1])
    dim = flat.shape[1]
    out = np.empty((len(flat), dim + SCALE_BYTES), dtype=PACKED)
    for start in range(0, len(flat), SLICE_ROWS):
        part = flat[start : start + SLICE_ROWS]
        top = np.abs(part).max(axis=1, keepdims=True) if dim else np.zeros((len(part), 1), np.float32)
        codes = np.rint(np.divide(part * np.float32(LEVELS), top, out=np.zeros_like(part), where=top > 0))
        ints = codes.astype(np.int8)
        squares = np.einsum("ij,ij->i", ints, ints, dtype=np.int64)  # exact: at most dim x 127^2
        norms = np.sqrt(squares.astype(np.float64))
        scales = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0).astype("<f4")
        out[start : start + len(part), :dim] = ints
        out[start : start + len(part), dim:] = scales.reshape(-1, 1).view(np.int8)
    return out.reshape(*wide.shape[:-1], out.shape[1])


def unpack(rows: npt.NDArray[np.generic]) -> Vectors:
    """Packed rows (n x dim + 4, or one row) read back as float32 rows: each code times its row's scale."""
    flat = rows.reshape(-1, rows.shape[-1])
    dim = flat.shape[1] - SCALE_BYTES
    scales = np.ascontiguousarray(flat[:, dim:]).view("<f4").astype(np.float32)
    out = flat[:, :dim].astype(np.float32)
    out *= scales
    return out.reshape(*rows.shape[:-1], dim)
