"""Row storage of the live state: a growable matrix (float32, or float16 or 8-bit packed rows where a memory stores
its vectors narrow: `ROLE_DTYPES`), read as float32, and the alive keys of one kind in canonical order."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress
from pathlib import Path
from typing import Generic, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from engram.bulk import collector_paused
from engram.graph.parallel import row_dots
from engram.index.state.mapped_rows import Pages, Spilled
from engram.store.packed_rows import PACKED, pack, packed_width, unpack
from engram.store.snapshot_parts import SavedPart
from engram.types import Triple

Vectors = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
SPILL_ROWS = 16_384  # the fewest appended rows `Rows.spill` moves to a file (24 MiB at 384 dimensions)
# what a `Rows` may hold (int8: packed rows, engram.store.packed_rows); it is always read as float32
STORED_TYPES = (np.dtype(np.float32), np.dtype(np.float16), PACKED)
F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
# each memory precision (`graph.vector_precision`, meta `vector_dtype`): the dtype of each role's rows. Phrase
# vectors are float16 at the narrowest, since synonym edges sit at a cosine threshold (docs/scale.md)
ROLE_DTYPES: dict[str, dict[str, np.dtype[np.generic]]] = {
    "float32": {"passage": F32, "phrase": F32, "fact": F32},
    "float16": {"passage": F32, "phrase": F16, "fact": F16},
    "int8": {"passage": F16, "phrase": F16, "fact": PACKED},
}
PRECISIONS = tuple(ROLE_DTYPES)


class RowView:
    """The rows of a `Rows` at one moment, as one or two blocks (a memory-mapped saved matrix and the rows
    appended since), read as a single float32 matrix: `len`, `shape`, row indexing (an int, a slice or an array of
    rows), `dots` and `np.asarray` (which copies when there are two blocks or the rows are stored narrow).
    The blocks are not copied."""

    def __init__(self, blocks: Sequence[Vectors], dim: int) -> None:
        self.blocks = tuple(b for b in blocks if len(b))
        self.dim = dim
        self.starts = np.cumsum([0, *(len(b) for b in self.blocks)]).astype(np.int64)
        self.shape = (int(self.starts[-1]), dim)
        self.dtype = np.dtype(np.float32)
        self._widened: tuple[Vectors, ...] | None = None  # the blocks as float32, made by the first `dots`

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> Vectors:
        if len(self.blocks) == 1:
            return np.asarray(_wide(self.blocks[0]), dtype=dtype or np.float32)
        out = np.empty(self.shape, dtype=dtype or np.float32)
        for b, block in enumerate(self.blocks):
            out[int(self.starts[b]) : int(self.starts[b + 1])] = _wide(block)
        return out

    def _empty(self) -> Vectors:
        return np.zeros((0, self.dim), dtype=np.float32)

    def __getitem__(self, key: int | slice | npt.ArrayLike) -> Vectors:
        if len(self.blocks) <= 1:
            whole = self.blocks[0] if self.blocks else self._empty()
            return _wide(whole[key])  # type: ignore[index]
        if isinstance(key, (int, np.integer)):
            row = int(key) + len(self) if int(key) < 0 else int(key)
            if not 0 <= row < len(self):
                raise IndexError(f"row {key} out of range for {len(self)} rows")
            block = int(np.searchsorted(self.starts, row, side="right")) - 1
            return _wide(self.blocks[block][row - int(self.starts[block])])
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return self._span(start, max(start, stop))
            return self._gather(np.arange(start, stop, step))
        picked = np.asarray(key)
        return self._gather(np.flatnonzero(picked) if picked.dtype == np.bool_ else picked.astype(np.int64))

    def _gather(self, rows: IntArray) -> Vectors:
        rows = rows.reshape(-1)
        rows = np.where(rows < 0, rows + len(self), rows)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        which = np.searchsorted(self.starts, rows, side="right") - 1
        for b, block in enumerate(self.blocks):
            hit = which == b
            if hit.any():
                out[hit] = _wide(block[rows[hit] - self.starts[b]])
        return out

    def _span(self, start: int, stop: int) -> Vectors:
        """Rows start..stop: a view of one float32 block when they lie in one, else a copy."""
        for b, block in enumerate(self.blocks):
            first = int(self.starts[b])
            if first <= start and stop <= first + len(block):
                return _wide(block[start - first : stop - first])
        return self[np.arange(start, stop)]

    def dots(self, vector: Vectors, limit: int | None = None) -> Vectors:
        """`rows @ vector` for the first `limit` rows (all by default), block by block (`row_dots`: the same
        floats at any row position). Float16 blocks are widened once per view and kept: numpy widens about two
        nanoseconds a number, ten times the dot's cost, so a scan per query would otherwise pay it every time
        (a view's full scans are the small tables' and those without fact codes)."""
        if self._widened is None:
            self._widened = tuple(_wide(b) for b in self.blocks)  # float32 blocks are not copied
        size = len(self) if limit is None else min(limit, len(self))
        out = np.empty(size, dtype=np.float32)
        for b, block in enumerate(self._widened):
            first = int(self.starts[b])
            if first >= size:
                break
            part = block[: size - first]
            out[first : first + len(part)] = row_dots(part, vector)
        return out


def _wide(rows: npt.NDArray[np.generic]) -> Vectors:
    """`rows` as float32: themselves when they are, else a float32 copy (exact: every float16 is a float32;
    packed rows are read back as their codes times their scales)."""
    if rows.dtype == PACKED:
        return unpack(rows)
    return cast(Vectors, np.asarray(rows, dtype=np.float32))


def _stored(rows: npt.ArrayLike, dtype: np.dtype[np.generic]) -> npt.NDArray[np.generic]:
    """Float rows in the stored `dtype` (packed rows are coded; float16 is rounded by the assignment itself)."""
    return pack(rows) if dtype == PACKED else np.asarray(rows)


@dataclass
class Part:
    """Saved rows taken as they are: a copy-on-write memory map of a snapshot file stays one. `pages` lets
    `Rows.release` drop them (None once `set_row` wrote to them, or for rows in RAM); `saved` is the snapshot
    part (vector and key files) they map unwritten (None once written to), which the next snapshot links."""

    rows: Vectors
    pages: Pages | None
    saved: SavedPart | None


class Rows:
    """A growable matrix in blocks, of `dtype` (float32; float16: half the bytes; or int8, rows packed with their
    own scales, `width` columns, engram.store.packed_rows: a quarter; the narrow ones read back as float32 and
    coded once when appended, so every reader sees the same floats wherever a row lies): `parts`, saved
    matrices taken as they are (the parts of a snapshot),
    then the rows moved out of RAM by `spill` (each in an unnamed temporary file, mapped shared), then `tail`,
    the rows appended since, in memory (capacity grows by half, or to a quarter more than a large append needs:
    the slack is RAM once written). Appending never copies the parts, so the first change after opening a large
    memory does not pull its vectors into RAM."""

    def __init__(self, dim: int, dtype: npt.DTypeLike = np.float32) -> None:
        self.dim = dim
        self.dtype = np.dtype(dtype)
        if self.dtype not in STORED_TYPES:
            raise ValueError(f"rows are stored as float32, float16 or int8, not {self.dtype}")
        self.width = packed_width(dim) if self.dtype == PACKED else dim  # columns of a stored block
        self.parts: list[Part] = []
        self.spilled: list[Spilled] = []
        self.tail: Vectors = np.zeros((16, self.width), dtype=self.dtype)
        self.tail_size = 0

    @property
    def size(self) -> int:
        return sum(len(p.rows) for p in self.parts) + sum(len(s.rows) for s in self.spilled) + self.tail_size

    def append(self, vectors: Vectors) -> None:
        def copy(rows: Vectors) -> None:
            rows[:] = vectors

        self.append_filled(len(vectors), copy)

    def append_filled(self, count: int, fill: Callable[[Vectors], object]) -> None:
        """Append `count` rows that `fill` writes in place (every one of them), with no copy in between: a
        large load is not held twice. Rows are appended only when `fill` returns."""
        need = self.tail_size + count
        if need > len(self.tail):
            # a quarter more than needed: a state loaded into RAM (no snapshot) is not copied again by its first
            # change (np.zeros maps untouched pages lazily, so the slack costs no RAM until it is written)
            rows = max(need + need // 4, len(self.tail) + len(self.tail) // 2)
            grown = np.zeros((rows, self.width), dtype=self.dtype)
            grown[: self.tail_size] = self.tail[: self.tail_size]
            self.tail = grown
        if self.dtype == np.float32:
            fill(self.tail[self.tail_size : need])
        else:  # filled as float32 (a fill writes the embedder's rows), then rounded or coded into the tail
            wide = np.zeros((count, self.dim), dtype=np.float32)
            fill(wide)
            self.tail[self.tail_size : need] = _stored(wide, self.dtype)
        self.tail_size = need

    def set_row(self, row: int, vector: Vectors) -> None:
        """Overwrite an existing row (a copy-on-write part keeps the change in this process only, and is no
        longer its file's rows; a spilled row's change goes to its file's pages, which `release` never drops
        unwritten)."""
        value = _stored(vector, self.dtype)
        for part in self.parts:
            if row < len(part.rows):
                part.rows[row] = value
                part.pages = part.saved = None  # its written page must stay, and differs from the file
                return
            row -= len(part.rows)
        for spill in self.spilled:
            if row < len(spill.rows):
                spill.rows[row] = value
                return
            row -= len(spill.rows)
        self.tail[row] = value

    def view(self) -> RowView:
        return RowView(self.blocks(), self.dim)

    def blocks(self) -> list[Vectors]:
        """The parts, the spilled blocks, then the appended rows (any may be empty)."""
        return [*(p.rows for p in self.parts), *(s.rows for s in self.spilled), self.tail[: self.tail_size]]

    def saved_parts(self) -> list[SavedPart | None]:
        """The snapshot part each part maps unwritten (aligned with the leading `blocks`)."""
        return [p.saved for p in self.parts]

    def relocate(self, saved: Sequence[SavedPart | None]) -> None:
        """Where each part's files lie now (a newer snapshot linked them; None: not a saved part any more)."""
        for part, file in zip(self.parts, saved):
            part.saved = file

    def adopt(self, matrix: Vectors, saved: SavedPart | None = None) -> None:
        """Hold `matrix` as the rows, not copied (later appends go to the tail)."""
        self.adopt_parts([(matrix, saved)])

    def adopt_parts(self, parts: Sequence[tuple[Vectors, SavedPart | None]]) -> None:
        """Hold the matrices as the rows, one after another, not copied (`saved`: the file each maps); a matrix
        of another dtype than the rows' is converted (a copy in RAM, no file the next snapshot links)."""
        self.parts = [
            Part(m, Pages.of(m), saved) if m.dtype == self.dtype else Part(self._converted(m), None, None)
            for m, saved in parts
        ]
        self.spilled = []
        self.tail = np.zeros((16, self.width), dtype=self.dtype)
        self.tail_size = 0

    def _converted(self, matrix: npt.NDArray[np.generic]) -> Vectors:
        """`matrix` (rows of another stored dtype) in this one's, a slice at a time."""
        out = np.empty((len(matrix), self.width), dtype=self.dtype)
        for start in range(0, len(matrix), SPILL_ROWS):
            out[start : start + SPILL_ROWS] = _stored(_wide(matrix[start : start + SPILL_ROWS]), self.dtype)
        return out

    def spill(self, folder: Path, least: int | None = None) -> bool:
        """Move the appended rows, when there are at least `least`, to an unnamed temporary file in `folder`
        (gone with the process, even after a crash), mapped shared: the rows read as before, and their pages
        belong to the kernel's page cache, not to this process, once `release`d. Views taken before keep the
        rows they had. Returns whether rows moved. `least` defaults to `SPILL_ROWS`."""
        if self.tail_size < max(SPILL_ROWS if least is None else least, 1):
            return False
        spill = Spilled.write(folder, self.tail[: self.tail_size])
        self.spilled.append(spill)
        self.tail = np.zeros((16, self.width), dtype=self.dtype)
        self.tail_size = 0
        return True

    def gather(self, view: RowView, rows: IntArray) -> Vectors:
        """`view[rows]` (a view of these rows), with the rows of mapped files (saved parts no `set_row` wrote to,
        spilled rows) read from the files (`Pages.read`), not through the mappings: a read fault maps the file's
        cached pages around the row too, so rows spread over a mapped matrix would put most of its pages in
        this process's resident set until the next `release`."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= len(view)):
            raise IndexError(f"rows out of range for {len(view)} rows")
        files = [(p.rows, p.pages) for p in self.parts if p.pages is not None]
        files += [(s.rows, s.pages) for s in self.spilled]
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        which = np.searchsorted(view.starts, rows, side="right") - 1 if len(view.blocks) > 1 else None
        for b, block in enumerate(view.blocks):
            at = np.arange(len(rows)) if which is None else np.flatnonzero(which == b)
            if not len(at):
                continue
            local = rows[at] - view.starts[b]
            pages = next((pages for matrix, pages in files if matrix is block), None)
            if block.dtype == np.float32:
                if pages is None or not pages.read(local, out, at):
                    out[at] = block[local]
                continue
            narrow = np.empty((len(at), block.shape[1]), dtype=block.dtype)  # read as stored, then widened
            if pages is None or not pages.read(local, narrow, np.arange(len(at), dtype=np.int64)):
                narrow[:] = block[local]
            out[at] = _wide(narrow)
        return out

    def release(self, window: Vectors | None = None) -> None:
        """Drop this process's pages of the mapped rows (spilled ones, and memory-mapped parts no `set_row`
        wrote to), or only those of `window` (rows of one block); they are read again from the page cache or
        the file when next used. Rows in RAM: no-op."""
        for pages in [*(s.pages for s in self.spilled), *(p.pages for p in self.parts if p.pages)]:
            pages.drop(window)


K = TypeVar("K", str, Triple)
Alive = Callable[[IntArray], "npt.NDArray[np.bool_]"]  # which of these rows hold an alive key


class SortedKeys(Generic[K]):
    """The alive keys of one kind in sorted order, with their rows, refreshed lazily: `touch` a key (with its
    row) whose aliveness may have changed; `keys(alive)` and `rows(alive)` apply the changes - a few by binary
    search and insertion, many by one merge of two sorted runs - instead of re-sorting or looking every key up
    again. `alive` answers for an array of rows at once (the touched keys' rows)."""

    BULK = 64  # more changes than this at once: one merge of the kept keys and the new ones

    def __init__(self) -> None:
        self._keys: list[K] | None = []  # None: a restored order, its keys read through `_key_of` when needed
        self._key_of: Callable[[int], K] | None = None  # a restored order's row -> key
        self._many: Callable[[list[int]], list[K]] | None = None
        self._rows: IntArray = np.zeros(0, dtype=np.int64)
        self._member = np.zeros(0, dtype=bool)  # by row: the key is in the order (no set of every key)
        self._touched: dict[K, int] = {}  # key -> its row (a key's row never changes)

    def touch(self, key: K, row: int) -> None:
        self._touched[key] = row

    def keys(self, alive: Alive) -> list[K]:
        self._refresh(alive)
        return self._keys_made()

    def rows(self, alive: Alive) -> IntArray:
        """The rows of `keys(alive)`, in the same order (a new array after each change, never mutated)."""
        self._refresh(alive)
        return self._rows

    def restore(
        self, rows: IntArray, key_of: Callable[[int], K], many: Callable[[list[int]], list[K]] | None = None
    ) -> None:
        """Take a saved order (the rows of the alive keys, by key) without sorting: nothing touched since. Its
        keys are read one at a time (`key_of` a row) by the binary searches of a few changes, and all at once
        (`many`, else `key_of` each) only when many change together or `keys` is called."""
        self._keys, self._key_of, self._many = None, key_of, many
        self._rows = rows.astype(np.int64)
        self._member = np.zeros(int(rows.max()) + 1 if len(rows) else 0, dtype=bool)
        self._member[self._rows] = True
        self._touched = {}

    def _keys_made(self) -> list[K]:
        if self._keys is None:
            assert self._key_of is not None
            rows = self._rows.tolist()
            with collector_paused():
                self._keys = self._many(rows) if self._many is not None else list(map(self._key_of, rows))
        return self._keys

    def _ordered(self) -> Sequence[K]:
        """The keys in order: the list, or a restored order read through `_key_of` (for binary search)."""
        if self._keys is not None:
            return self._keys
        assert self._key_of is not None
        return _KeysAt(self._rows, self._key_of)

    def _refresh(self, alive: Alive) -> None:
        if not self._touched:
            return
        touched = list(self._touched)
        at = np.fromiter(self._touched.values(), np.int64, count=len(touched))
        self._touched = {}
        was = np.zeros(len(at), dtype=bool)
        inside = at < len(self._member)
        was[inside] = self._member[at[inside]]
        now = np.asarray(alive(at), dtype=bool)
        gone_at, fresh_at = np.flatnonzero(was & ~now), np.flatnonzero(now & ~was)
        gone = sorted(map(touched.__getitem__, gone_at.tolist()))
        fresh = [touched[i] for i in fresh_at.tolist()]
        if len(gone) + len(fresh) > self.BULK:
            self._merge(at[gone_at], fresh, at[fresh_at])
        else:
            self._apply_few(gone, sorted(zip(fresh, at[fresh_at].tolist())))
        born = at[fresh_at]
        if len(born) and int(born.max()) >= len(self._member):
            grown = np.zeros(max(int(born.max()) + 1, len(self._member) + len(self._member) // 2), dtype=bool)
            grown[: len(self._member)] = self._member
            self._member = grown
        self._member[at[gone_at]] = False
        self._member[born] = True

    def _merge(self, gone_rows: IntArray, fresh: list[K], fresh_rows: IntArray) -> None:
        """Drop the keys of `gone_rows` and add `fresh` (rows `fresh_rows`) in one sort, which finds the kept
        keys already in order: the rows follow the keys, none looked up again."""
        keys, rows = self._keys_made(), self._rows
        if len(gone_rows):
            dead = np.zeros(len(self._member), dtype=bool)  # every row held or gone is a member's
            dead[gone_rows] = True
            kept = ~dead[rows]
            keys, rows = list(compress(keys, kept.tolist())), rows[kept]
        merged = keys + fresh
        order = sorted(range(len(merged)), key=merged.__getitem__)
        self._keys = list(map(merged.__getitem__, order))
        self._rows = np.concatenate([rows, fresh_rows]).astype(np.int64)[np.array(order, dtype=np.int64)]

    def _apply_few(self, gone: list[K], fresh: list[tuple[K, int]]) -> None:
        """Delete `gone` and insert `fresh` (keys and rows; each sorted) by binary search, in the list or in the
        rows only."""
        if gone:
            at = [bisect_left(self._ordered(), k) for k in gone]
            if self._keys is not None:
                for i in reversed(at):
                    del self._keys[i]
            self._rows = np.delete(self._rows, at)
        if fresh:
            at = [bisect_left(self._ordered(), k) for k, _ in fresh]
            if self._keys is not None:
                for i, (k, _) in zip(reversed(at), reversed(fresh)):
                    self._keys.insert(i, k)
            self._rows = np.insert(self._rows, at, [row for _, row in fresh])


class _KeysAt(Sequence[K]):
    """The keys of `rows`, each made when read (`key_of`): what `bisect` needs of a list, without the list."""

    def __init__(self, rows: IntArray, key_of: Callable[[int], K]) -> None:
        self._rows = rows
        self._key_of: Callable[[int], K] = key_of

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> K: ...
    @overload
    def __getitem__(self, index: slice) -> list[K]: ...
    def __getitem__(self, index: int | slice) -> K | list[K]:
        if isinstance(index, slice):
            return [self._key_of(int(r)) for r in self._rows[index].tolist()]
        return self._key_of(int(self._rows[index]))
