"""Exact best and worst scores of a large vector table through 8-bit codes (optional: the `ann` extra, simsimd).

A query's fact scores feed HippoRAG 2 only through the top few facts and the normalisation by the highest and
lowest score, yet scoring every fact reads the whole float32 table (1.4 GB at 0.9M facts) at every query and
keeps it in the process. `CodedRows` keeps a copy of the rows as 8-bit integer codes, a quarter of the bytes:
component j of a row is `scales[j]` x its code (-127..127), `scales[j]` being the largest |component j| over the
rows present when the codes were fitted, over 127. A query is scored against the codes by an integer dot
product (simsimd's int8 kernel: VNNI or AVX2 instructions, exact sums): the query's weights q x scales are
rounded to integers in units of `unit` (the largest weight over 127), so a code's score is `unit` x an integer.

Two errors separate that score from the row's float32 dot with the query: the row's coding error, at most
||q|| x `error` (the Euclidean norm of decoded minus float32 row, the largest of any row), and the weights'
rounding, at most ||weights - unit x rounded weights|| x `size` (the largest Euclidean norm of a code row),
by Cauchy-Schwarz. So every row that can be among the `top` best (or be the worst) has a code score within
twice their sum of the `top`-th best code score (of the worst); only those rows are scored from the float32
table, by the same loop as a full scan (`row_dots`): the rows found, their scores and therefore the whole
ranking are bit for bit those of the full scan. Rows whose error exceeds the bound (appended later, outside the
ranges the codes were fitted to) are scored from float32 every time and left out of the cut: a clipped code can
score above every row, and a cut taken at it could leave out the best ones.

Rows only grow and a row's vector never changes (facts); the codes follow the table by encoding, at the next
search, the rows appended since, a slice at a time with the table's mapped pages dropped after each.

Codes saved beside the snapshot (engram.index.saved.codes_cache) are given by `loader` at the first search and used
mapped read-only, not encoded again: rows appended after them (up to `tail_rows`) are scored exactly, like
outliers; past that the codes are copied into RAM and the new rows encoded there.

A table stored as packed 8-bit rows (engram.store.packed_rows: codes and a scale per row) is its own codes: nothing
is encoded, kept or saved. Row i's value is s_i c_i with s_i ||c_i|| = 1, so with the query rounded as above
(q ~ `unit` x w) its code score s_i `unit` (w . c_i) is within ||q - `unit` w|| (plus float32 rounding) of its
exact score, the same bound for every row; the cut and the exact re-scoring are those of other tables.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from engram import optional
from engram.config import GraphConfig
from engram.errors import MissingDependencyError
from engram.graph.parallel import THREADS, kernel_dots, row_dots
from engram.index.state.rows import Rows, RowView
from engram.store.packed_rows import PACKED

Vectors = npt.NDArray[np.float32]
Codes = npt.NDArray[np.int8]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
INSTALL = "scoring facts through 8-bit codes needs the ann extra: pip install 'engram[ann]' (simsimd)"
LEVELS = 127  # codes and rounded weights lie in -127..127: a dot of 384 of them stays below 2^24 (exact float32)
SLICE_ROWS = 16_384  # rows encoded at a time (24 MiB of float32 at 384 dimensions)
ROUNDING = 1e-4  # float32 sums of 384 products: both scores' rounding stays far below this x ||q|| x ||row||
SPLIT_BYTES = 8 << 20  # codes below which a query's scan stays on one thread
TAIL_ROWS = 8_192  # rows appended after saved codes that are scored exactly before the codes are copied to RAM
GROWTH = 1.25  # an in-RAM code table grows by this factor (and a slice) when full
STRIDE = 16  # every STRIDE-th score bounds the cut of the best ones from below (kth_largest)


def available() -> bool:
    """Whether simsimd (the integer kernel) is installed (found, not imported)."""
    return optional.installed("simsimd")


def _kernel() -> Any:
    try:
        import simsimd
    except ImportError as exc:
        raise MissingDependencyError(INSTALL) from exc
    return simsimd


@dataclass(frozen=True)
class SavedCodes:
    """Codes as saved: rows 0..len(codes)-1 (int8, mapped read-only or in RAM), each dimension's scale, the
    largest coding error of a row within the scales' ranges, the largest code row norm and row norm of the other
    rows, and the rows coded worse than that error (outliers)."""

    codes: Codes
    scales: Vectors
    error: float
    size: float
    norm: float
    outliers: IntArray


def _spread(exact: FloatArray, found: IntArray, size: int, out: FloatArray | None, lowest: bool) -> FloatArray:
    """Scores of `size` rows: `exact` at `found`, every other row at the lowest of them (without `lowest`, the
    next float below it, so no other row ties a best one)."""
    out = np.empty(size, dtype=np.float64) if out is None else out
    low = float(exact.min()) if len(exact) else 0.0
    out.fill(low if lowest else float(np.nextafter(low, -np.inf)))
    out[found] = exact
    return out


def use_codes(config: GraphConfig, facts: int) -> bool:
    """Whether a view of `facts` fact rows scores them through codes, by `config.fact_codes`."""
    if config.fact_codes == "on" and not available():
        raise MissingDependencyError(INSTALL)
    if config.fact_codes == "off" or (config.fact_codes == "auto" and not available()):
        return False
    return config.fact_codes == "on" or facts >= config.fact_codes_min_rows


def kth_largest(values: npt.NDArray[np.floating[Any]], k: int) -> float:
    """The `k`-th largest of `values` (1 <= k <= len(values)), exactly. The `k`-th largest of every
    `STRIDE`-th value is at most it (those values are among all of them), so only the values at or above that
    one are partitioned: a few times `k` rather than every value, unless many tie there."""
    sample = values[::STRIDE]
    pool = values
    if len(sample) >= k:
        pool = values[values >= sample[np.argpartition(sample, len(sample) - k)[len(sample) - k]]]
    return float(np.partition(pool, len(pool) - k)[len(pool) - k])


class CodedRows:
    """8-bit codes of the rows of `rows` (a table that only grows, rows never rewritten)."""

    def __init__(self, rows: Rows, tail_rows: int = TAIL_ROWS, parts: int = THREADS) -> None:
        self.rows = rows
        self.parts = parts  # threads of one query's scan over a large table
        self.dim = rows.dim
        self.tail_rows = tail_rows
        self._codes: Codes = np.zeros((0, rows.dim), dtype=np.int8)  # rows 0..encoded-1 hold codes (then room)
        self._count = 0
        self.scales: Vectors | None = None  # each dimension's scale, fitted at the first encoding
        self.mapped = False  # `_codes` are saved codes, mapped read-only: rows past them are scored exactly
        self.error = 0.0  # the largest coding error of a row within the fitted ranges
        self.size = 0.0  # the largest Euclidean norm of a code row (outliers aside)
        self.norm = 0.0  # the largest row norm (outliers aside)
        self.outliers: IntArray = np.zeros(0, dtype=np.int64)  # rows coded worse than `error`
        self.loader: Callable[[], SavedCodes | None] | None = None  # saved codes, asked for once, when first needed
        self.saved_rows = 0  # rows of these codes that the saved file holds (engram.index.saved.codes_cache)
        self._scales: dict[int, tuple[Codes, FloatArray]] = {}  # a packed table's row scales, by block
        self._lock = threading.Lock()

    @property
    def encoded(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return self._count * self.dim

    def extremes(
        self,
        view: RowView,
        alive: BoolArray,
        query: Vectors,
        top: int,
        out: FloatArray | None = None,
        lowest: bool = True,
    ) -> FloatArray:
        """The query's scores (float32 dots, as float64) of the `top` best alive rows of `view` and of the worst,
        every other row at the lowest alive score, written to `out` (a new array by default) and returned.
        Exact: see the module's text. Without `lowest` the worst row is not searched for and every other row
        gets the next float below the lowest score found, so no other row ties a best one."""
        size = len(alive)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if self.rows.dtype == PACKED:
            found = self._near_packed(view, q, alive, top, lowest)
            exact = row_dots(self.rows.gather(view, found), q).astype(np.float64)
            return _spread(exact, found, size, out, lowest)
        with self._lock:  # rows coded are never rewritten: the scan reads them without the lock
            self._extend(view, size)
            codes = self.saved()
        coded = 0 if codes is None else min(len(codes.codes), size)  # a view older than the codes: its own rows
        outliers = np.zeros(0, dtype=np.int64) if codes is None else codes.outliers[codes.outliers < coded]
        near = np.zeros(0, dtype=np.int64)
        if codes is not None and coded:
            usable = alive[:coded].copy()
            usable[outliers] = False  # scored exactly: their codes say nothing
            near = self._near(codes, q, usable, top, lowest)
        tail = np.arange(coded, size, dtype=np.int64)  # rows past mapped codes
        found = np.unique(np.concatenate([near, tail[alive[tail]], outliers[alive[outliers]]]))
        exact = row_dots(self.rows.gather(view, found), q).astype(np.float64)
        return _spread(exact, found, size, out, lowest)

    def _near_packed(self, view: RowView, q: Vectors, alive: BoolArray, top: int, lowest: bool) -> IntArray:
        """`_near` for a packed table, which is its own codes: the alive rows whose code score is within twice
        the bound of the `top`-th best (and, with `lowest`, of the worst), sorted."""
        size = len(alive)
        count = int(np.count_nonzero(alive))
        unit = float(np.abs(q).max(initial=0.0)) / LEVELS
        if not count or not unit > 0 or top >= count:  # every alive row is a candidate
            return np.flatnonzero(alive).astype(np.int64)
        rounded = np.rint(q.astype(np.float64) / unit)
        off = float(np.linalg.norm(q.astype(np.float64) - unit * rounded)) * (1 + 1e-6)  # s_i ||c_i|| = 1 in float32
        reach = 2 * (off + ROUNDING * max(float(np.linalg.norm(q)), 1.0)) * (1 + 1e-9)
        weights = rounded.astype(np.int8)
        scores = np.empty(size, dtype=np.float64)
        kept: dict[int, tuple[Codes, FloatArray]] = {}
        for b, block in enumerate(view.blocks):
            first = int(view.starts[b])
            if first >= size:
                break
            part = block[: size - first]
            scales = self._row_scales(cast(Codes, block), kept)[: len(part)]
            codes = cast(Codes, part[:, : self.dim])  # strided rows: the kernel reads them in place
            into = scores[first : first + len(part)]
            np.multiply(self._scan(codes, weights), scales, out=into)
            into *= unit
        self._scales = kept
        hits = [np.zeros(0, dtype=np.int64)]
        if lowest:
            worst = np.where(alive, scores, np.inf)
            hits.append(np.flatnonzero(worst <= float(worst.min()) + reach))
        if count < size:
            np.copyto(scores, -np.inf, where=~alive)
        cut = kth_largest(scores, top) if top > 0 else np.inf
        hits.append(np.flatnonzero(scores >= cut - reach))
        return np.unique(np.concatenate(hits))

    def _near(self, codes: SavedCodes, q: Vectors, usable: BoolArray, top: int, lowest: bool) -> IntArray:
        """The `usable` rows whose code score is within twice the error bound of the `top`-th best usable
        code score (and, with `lowest`, of the worst): every row that can be among the best or the worst."""
        count = int(np.count_nonzero(usable))
        if not count:
            return np.zeros(0, dtype=np.int64)
        weights = q.astype(np.float64) * codes.scales
        unit = float(np.abs(weights).max()) / LEVELS
        if not unit > 0:  # a zero query: every row scores 0, so every row is a candidate
            return np.flatnonzero(usable)
        rounded = np.rint(weights / unit)
        off = float(np.linalg.norm(weights - unit * rounded))
        bound = float(np.linalg.norm(q.astype(np.float64))) * (codes.error + ROUNDING * max(codes.norm, 1.0))
        reach = math.floor(2 * (bound + off * codes.size) / unit * (1 + 1e-9)) + 1  # in code units, rounded up
        scores = self._scan(codes.codes[: len(usable)], rounded.astype(np.int8))  # exact integers
        hits = [np.zeros(0, dtype=np.int64)]
        if lowest:
            worst = np.where(usable, scores, np.inf)
            hits.append(np.flatnonzero(worst <= float(worst.min()) + reach))
        if top >= count:
            hits.append(np.flatnonzero(usable))
        elif top > 0:
            if count < len(usable):  # the scan's own buffer: no masked copy of every score
                np.copyto(scores, -np.inf, where=~usable)
            cut = kth_largest(scores, top)
            hits.append(np.flatnonzero(np.greater_equal(scores, np.float64(cut - reach))))  # compared in float64
        return np.concatenate(hits)

    def _row_scales(self, block: Codes, kept: dict[int, tuple[Codes, FloatArray]]) -> FloatArray:
        """The scales of a packed block's rows (float64), read from its rows once per block and kept while the
        block is in the views searched (a saved or spilled block is the same array in every view), in `kept`."""
        known = self._scales.get(id(block))
        if known is not None and known[0] is block:
            scales = known[1]
        else:
            scales = np.ascontiguousarray(block[:, self.dim :]).view("<f4").reshape(-1).astype(np.float64)
        kept[id(block)] = (block, scales)
        return scales

    def _scan(self, codes: Codes, weights: Codes) -> npt.NDArray[np.float32]:
        """Integer dot products of `weights` with each row of `codes` (exact: below 2^24 in float32)."""
        threads = self.parts if codes.size >= SPLIT_BYTES else 1
        return kernel_dots(_kernel(), weights, codes, threads)

    @contextmanager
    def held(self, view: RowView, size: int) -> Iterator[SavedCodes | None]:
        """Codes for rows 0..`size`-1 of `view` (loaded, or encoded: the rows past mapped codes only when more
        than `tail_rows`), no rows encoded while the caller reads them (engram.index.saved.codes_cache)."""
        with self._lock:
            self._extend(view, size)
            yield self.saved()

    def saved(self) -> SavedCodes | None:
        """The codes as `SavedCodes` (None before any are loaded or encoded)."""
        if self.scales is None:
            return None
        codes = self._codes[: self._count]
        return SavedCodes(codes, self.scales, self.error, self.size, self.norm, self.outliers)

    def adopt(self, saved: SavedCodes) -> None:
        """Use `saved` (mapped, holding at most this table's rows) from now on."""
        self._codes, self._count, self.mapped = saved.codes, len(saved.codes), True
        self.saved_rows = self._count
        self.scales, self.error, self.size, self.norm = saved.scales, saved.error, saved.size, saved.norm
        self.outliers = saved.outliers

    def _extend(self, view: RowView, size: int) -> None:
        """Encode rows `encoded`..`size` of `view` (fitting the codes' scales first, when none are)."""
        if self.scales is None and self.loader is not None:
            loader, self.loader = self.loader, None
            saved = loader()
            if saved is not None and len(saved.codes) <= len(view) and saved.codes.shape[1] == self.dim:
                self.adopt(saved)
        start = self._count
        if start >= size:  # a newer view's search encoded them (an older view masks the rows past its own)
            return
        if self.mapped and size - start <= self.tail_rows:
            return
        if self.scales is None:
            self.scales = self._fit(view, size)
        self._reserve(size)
        outliers: list[IntArray] = [self.outliers]
        for first in range(start, size, SLICE_ROWS):
            last = min(first + SLICE_ROWS, size)
            x = np.ascontiguousarray(view[first:last], dtype=np.float32)
            codes, errors = self._encode(x)
            self._codes[first:last] = codes
            self._count = last
            if start == 0:
                bad = ~np.isfinite(errors)  # a row that is not a number stays an outlier
                self.error = max(self.error, float(errors[~bad].max(initial=0.0)))
            else:
                bad = ~(errors <= self.error)
            outliers.append(first + np.flatnonzero(bad).astype(np.int64))
            norms = np.einsum("ij,ij->i", x, x)[~bad]
            self.norm = max(self.norm, float(np.sqrt(norms.max(initial=0.0))))
            squares = np.einsum("ij,ij->i", codes, codes, dtype=np.int64)[~bad]
            self.size = max(self.size, float(np.sqrt(squares.max(initial=0))))
            self.rows.release()
        self.outliers = np.concatenate(outliers)

    def _encode(self, x: Vectors) -> tuple[Codes, Vectors]:
        """The rows' codes and coding errors (Euclidean norm of decoded minus row)."""
        assert self.scales is not None
        codes = np.clip(np.rint(x / self.scales), -LEVELS, LEVELS).astype(np.int8)
        off = codes * self.scales - x
        return codes, np.sqrt(np.einsum("ij,ij->i", off, off))

    def _reserve(self, size: int) -> None:
        """Room for `size` rows of codes in RAM (a mapped table is copied; a full one grows by `GROWTH`)."""
        if len(self._codes) >= size and not self.mapped:
            return
        room = size if not self._count else max(size, int(len(self._codes) * GROWTH) + SLICE_ROWS)
        grown = np.empty((room, self.dim), dtype=np.int8)
        grown[: self._count] = self._codes[: self._count]
        self._codes, self.mapped = grown, False

    def _fit(self, view: RowView, size: int) -> Vectors:
        """Each dimension's scale: its largest magnitude over the rows present, over `LEVELS` (1 where none)."""
        high = np.zeros(self.dim, dtype=np.float32)
        for first in range(0, size, SLICE_ROWS):
            x = view[first : min(first + SLICE_ROWS, size)]
            high = np.maximum(high, np.abs(x).max(axis=0))
            self.rows.release()
        scales = high / np.float32(LEVELS)
        scales[~(np.isfinite(scales) & (scales > 0))] = 1.0
        fitted: Vectors = scales.astype(np.float32)
        return fitted
