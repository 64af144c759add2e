"""Exact best and worst scores of a large vector table through 8-bit codes (optional: the `ann` extra, faiss).

A query's fact scores feed HippoRAG 2 only through the top few facts and the normalisation by the highest and
lowest score, yet scoring every fact reads the whole float32 table (1.4 GB at 0.9M facts) at every query and
keeps it in the process. `CodedRows` keeps a copy of the rows as 8-bit codes (faiss's scalar quantizer, one
byte per component over each dimension's range: a quarter of the bytes) and the largest coding error of any
row, `error` (the Euclidean norm of decoded minus float32 row). A code's score is within ||q|| x error of the
row's, so one pass over the codes finds every row that can be among the `top` best or the worst, and only
those rows are scored from the float32 table, by the same loop as a full scan (`row_dots`): the rows found,
their scores and therefore the whole ranking are bit for bit those of the full scan. Rows whose error exceeds
the bound (appended later, outside the ranges the codes were fitted to) are scored from float32 every time.

Rows only grow and a row's vector never changes (facts); the codes follow the table by encoding, at the next
search, the rows appended since, a slice at a time with the table's mapped pages dropped after each.

Codes saved beside the snapshot (engram.index.codes_cache) are given by `loader` at the first search and used
mapped read-only, not encoded again: rows appended after them (up to `tail_rows`) are scored exactly, like
outliers; past that the codes are copied into RAM and the new rows encoded there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.config import GraphConfig
from engram.errors import InputError
from engram.graph.ann import INSTALL, available, library
from engram.graph.parallel import THREADS, in_parallel, row_dots, row_ranges
from engram.index.rows import Rows, RowView

Vectors = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
SLICE_ROWS = 16_384  # rows encoded at a time (24 MiB of float32 at 384 dimensions)
FIRST_K = 256  # code results per query before widening (a wider first search costs little more)
ROUNDING = 1e-4  # float32 sums of 384 products: both scores' rounding stays far below this x ||q|| x ||row||
SPLIT_BYTES = 8 << 20  # codes below which a query's search stays on one thread
TAIL_ROWS = 8_192  # rows appended after saved codes that are scored exactly before the codes are copied to RAM


@dataclass(frozen=True)
class SavedCodes:
    """Codes as saved: a faiss `IndexScalarQuantizer` (mapped read-only) of rows 0..ntotal-1, the largest coding
    error of a row within its fitted ranges, the largest row norm, and the rows coded worse than that error."""

    index: Any
    error: float
    norm: float
    outliers: IntArray


def use_codes(config: GraphConfig, facts: int) -> bool:
    """Whether a view of `facts` fact rows scores them through codes, by `config.fact_codes`."""
    if config.fact_codes == "on" and not available():
        raise InputError(INSTALL)
    if config.fact_codes == "off" or (config.fact_codes == "auto" and not available()):
        return False
    return config.fact_codes == "on" or facts >= config.fact_codes_min_rows


class CodedRows:
    """8-bit codes of the rows of `rows` (a table that only grows, rows never rewritten)."""

    def __init__(self, rows: Rows, tail_rows: int = TAIL_ROWS, parts: int = THREADS) -> None:
        self.rows = rows
        self.parts = parts  # searches at once: one query's rows cut into parts / queries ranges
        self.dim = rows.dim
        self.tail_rows = tail_rows
        self._index: Any = None  # faiss IndexScalarQuantizer over rows 0..encoded-1, fitted at the first encoding
        self.mapped = False  # `_index` is saved codes, mapped read-only: rows past them are scored exactly
        self.error = 0.0  # the largest coding error of a row within the fitted ranges
        self.norm = 0.0  # the largest row norm
        self.outliers: IntArray = np.zeros(0, dtype=np.int64)  # rows coded worse than `error`
        self.loader: Callable[[], SavedCodes | None] | None = None  # saved codes, asked for once, when first needed
        self.saved_rows = 0  # rows of these codes that the saved file holds (engram.index.codes_cache)
        self._lock = threading.Lock()

    @property
    def encoded(self) -> int:
        return 0 if self._index is None else int(self._index.ntotal)

    @property
    def nbytes(self) -> int:
        return self.encoded * self.dim

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
        Exact: see the module's text. Without `lowest` the worst row is not searched for (half the passes) and
        every other row gets the next float below the lowest score found, so no other row ties a best one."""
        size = len(alive)
        with self._lock:
            self._extend(view, size)
            keep = np.zeros(max(self.encoded, size), dtype=bool)
            keep[:size] = alive
            q = np.asarray(query, dtype=np.float32).reshape(-1)
            slack = 2 * float(np.linalg.norm(q)) * (self.error + ROUNDING * max(self.norm, 1.0))
            best = self._within(np.stack([q, -q]) if lowest else q[None], keep, top, slack)
            tail = np.arange(self.encoded, size, dtype=np.int64)  # rows past mapped codes
            best += [tail[alive[tail]], self.outliers[keep[self.outliers]]]
        found = np.unique(np.concatenate(best))
        exact = row_dots(self.rows.gather(view, found), q).astype(np.float64)
        out = np.empty(size, dtype=np.float64) if out is None else out
        low = float(exact.min()) if len(exact) else 0.0
        out.fill(low if lowest else float(np.nextafter(low, -np.inf)))
        out[found] = exact
        return out

    def _within(self, queries: Vectors, keep: BoolArray, top: int, slack: float) -> list[IntArray]:
        """For each query (the vector, then its negation), the alive rows whose code score is within `slack`
        of the `top`-th best (of the best, for the negation), widening the search until no more can be."""
        faiss = library()
        bits = np.packbits(keep, bitorder="little")  # kept alive by this frame while the searches read it
        kept = faiss.IDSelectorBitmap(len(keep), faiss.swig_ptr(bits))
        alive = int(keep.sum())
        wants = [min(top, alive), min(1, alive)][: len(queries)]
        k = min(max(FIRST_K, 4 * top), alive)
        while True:
            scores, ids = self._search(queries, kept, max(k, 1))
            out: list[IntArray] = []
            wider = False
            for qi, want in enumerate(wants):
                hit = ids[qi] >= 0
                if not want or not hit.any():
                    out.append(np.zeros(0, dtype=np.int64))
                    continue
                floor = float(scores[qi][hit][want - 1]) - slack
                near = hit & (scores[qi] >= floor)
                out.append(ids[qi][near].astype(np.int64))
                wider |= bool(near.all()) and k < alive
            if not wider:
                return out
            k = min(4 * k, alive)

    def _search(self, queries: Vectors, kept: Any, k: int) -> tuple[npt.NDArray[np.float32], IntArray]:
        """The `k` best code scores of the `kept` rows (a faiss selector) for each query, best first (-1 ids past
        the rows kept).
        faiss scans for one query on one thread, so each query's rows are cut into ranges, one search each on
        the thread pool, and the ranges' best merged: the same scores as one search over all rows."""
        faiss = library()
        ranges = row_ranges(self.encoded, max(1, self.parts // len(queries)) if self._split(len(queries)) else 1)

        def search(query: Vectors, a: int, b: int) -> tuple[npt.NDArray[np.float32], IntArray]:
            part = faiss.IDSelectorRange(a, b)
            both = faiss.IDSelectorAnd(part, kept)
            params = faiss.SearchParameters(sel=both if len(ranges) > 1 else kept)
            found: tuple[npt.NDArray[np.float32], IntArray] = self._index.search(query[None], k, params=params)
            return found

        calls = [partial(search, query, a, b) for query in queries for a, b in ranges]
        found = in_parallel(calls)
        scores = np.concatenate([f[0] for f in found], axis=1).reshape(len(queries), -1)
        ids = np.concatenate([f[1] for f in found], axis=1).reshape(len(queries), -1)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # misses (score -inf or lowest) sort last
        picked = np.take_along_axis(ids, order, axis=1)
        best = np.take_along_axis(scores, order, axis=1)
        best[picked < 0] = -np.inf
        return best, picked

    def _split(self, queries: int) -> bool:
        """Whether a search of this many queries cuts the rows into ranges: a large table, and more threads than
        queries."""
        return self.parts > queries and self.encoded * self.dim >= SPLIT_BYTES

    @contextmanager
    def held(self, view: RowView, size: int) -> Iterator[SavedCodes | None]:
        """Codes for rows 0..`size`-1 of `view` (loaded, or encoded: the rows past mapped codes only when more
        than `tail_rows`), unchanged by any search while the caller reads them (engram.index.codes_cache)."""
        with self._lock:
            self._extend(view, size)
            yield self.saved()

    def saved(self) -> SavedCodes | None:
        """The codes as `SavedCodes` (None before any are loaded or encoded)."""
        if self._index is None:
            return None
        return SavedCodes(self._index, self.error, self.norm, self.outliers)

    def adopt(self, saved: SavedCodes) -> None:
        """Use `saved` (mapped, holding at most this table's rows) from now on."""
        self._index, self.mapped, self.saved_rows = saved.index, True, int(saved.index.ntotal)
        self.error, self.norm, self.outliers = saved.error, saved.norm, saved.outliers

    def _extend(self, view: RowView, size: int) -> None:
        """Encode rows `encoded`..`size` of `view` (fitting the codes' ranges first, when none are)."""
        if self._index is None and self.loader is not None:
            loader, self.loader = self.loader, None
            saved = loader()
            if saved is not None and saved.index.ntotal <= len(view) and saved.index.d == self.dim:
                self.adopt(saved)
        start = self.encoded
        if start >= size:  # a newer view's search encoded them (an older view masks the rows past its own)
            return
        if self.mapped:
            if size - start <= self.tail_rows:
                return
            self._index, self.mapped = _in_ram(self._index), False
        if self._index is None:
            self._index = self._fit(view, size)
        outliers: list[IntArray] = [self.outliers]
        for first in range(start, size, SLICE_ROWS):
            x = np.ascontiguousarray(view[first : min(first + SLICE_ROWS, size)], dtype=np.float32)
            codes = self._index.sa_encode(x)
            off = self._index.sa_decode(codes) - x
            errors = np.sqrt(np.einsum("ij,ij->i", off, off))
            self._index.add_sa_codes(codes)
            self.norm = max(self.norm, float(np.sqrt(np.einsum("ij,ij->i", x, x).max())))
            if start == 0:
                self.error = max(self.error, float(errors.max()))
            else:
                outliers.append(first + np.flatnonzero(errors > self.error).astype(np.int64))
            self.rows.release()
        self.outliers = np.concatenate(outliers)

    def _fit(self, view: RowView, size: int) -> Any:
        """A scalar quantizer whose ranges are each dimension's minimum and maximum over the rows present."""
        faiss = library()
        low = np.full(self.dim, np.inf, dtype=np.float32)
        high = np.full(self.dim, -np.inf, dtype=np.float32)
        for first in range(0, size, SLICE_ROWS):
            x = view[first : min(first + SLICE_ROWS, size)]
            low, high = np.minimum(low, x.min(axis=0)), np.maximum(high, x.max(axis=0))
            self.rows.release()
        index = faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
        index.train(np.stack([low, high]))  # min-max ranges: of these two rows, the ones above
        return index


def _in_ram(mapped: Any) -> Any:
    """A copy in RAM of mapped codes, which can grow (faiss cannot add to a mapped index)."""
    faiss = library()
    index = faiss.IndexScalarQuantizer(mapped.d, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    index.sq.trained = mapped.sq.trained
    index.is_trained = True
    size = int(mapped.ntotal) * int(mapped.code_size)
    if size:
        codes = faiss.rev_swig_ptr(mapped.codes.data(), size).reshape(int(mapped.ntotal), int(mapped.code_size))
        index.add_sa_codes(codes)
    return index
