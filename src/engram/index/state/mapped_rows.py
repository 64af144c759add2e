"""Rows held in file mappings: a memory-mapped snapshot's pages given back to the kernel, and rows moved out of
RAM to an unnamed temporary file."""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class Pages:
    """The pages of rows held in a file mapping (`rows` starts `offset` bytes into `mapping`), which `drop` gives
    back to the kernel: a shared mapping's, or a private one's never written (dropping a written private page
    would lose the change)."""

    def __init__(
        self, mapping: mmap.mmap, rows: Vectors, offset: int, file: tuple[IO[bytes], int] | None = None
    ) -> None:
        self.mapping, self.rows, self.offset = mapping, rows, offset
        self.start = int(rows.__array_interface__["data"][0])
        self.file = file  # the mapped file, open, and where row 0 starts in it: `read` reads rows through it

    @classmethod
    def of(cls, rows: Vectors) -> Pages | None:
        """The pages of a memory-mapped matrix (np.load's `mmap_mode`), None for rows in RAM."""
        mapping = rows.base
        if not isinstance(mapping, mmap.mmap) or mapping.closed or not rows.flags.c_contiguous:
            return None
        try:
            anchor = ctypes.c_char.from_buffer(mapping)  # the mapping's first byte (a copy-on-write map is writable)
        except (TypeError, ValueError):  # a read-only mapping: its pages are kept
            return None
        try:
            offset = int(rows.__array_interface__["data"][0]) - ctypes.addressof(anchor)
        finally:
            del anchor
        if not 0 <= offset <= len(mapping) - rows.nbytes:
            return None
        return cls(mapping, rows, offset, _opened(rows))

    def read(self, rows: npt.NDArray[np.int64], out: Vectors, at: npt.NDArray[np.int64]) -> bool:
        """Copy `rows` into `out[at]` with reads of the file (the page cache's copy) rather than through the
        mapping: a read fault maps the cached pages around the row too (a whole large folio on this machine's
        kernel), so rows gathered from all over a mapped matrix would put most of it in the process. Runs of
        consecutive rows (to consecutive places) are read at once. False when there is no file to read."""
        if self.file is None or not out.flags.c_contiguous:
            return False
        if not len(rows):
            return True
        handle, first = self.file
        size, fd = self.rows.strides[0], handle.fileno()
        target = out.reshape(-1).view(np.uint8).data
        breaks = (rows[1:] != rows[:-1] + 1) | (at[1:] != at[:-1] + 1)  # slices: np.diff's overhead is the cost here
        cuts = (np.flatnonzero(breaks) + 1).tolist()
        begins, ends = [0, *cuts], [*cuts, len(rows)]  # runs of consecutive rows to consecutive places
        for b, e, row, place in zip(begins, ends, rows[begins].tolist(), at[begins].tolist()):
            _read_fully(fd, target[place * size : (place + e - b) * size], first + row * size)
        return True

    def drop(self, window: Vectors | None = None) -> None:
        """Drop all the pages, or those wholly inside `window` (rows of `rows`; other rows are ignored)."""
        if not hasattr(self.mapping, "madvise"):
            return
        first, size = 0, self.rows.nbytes
        if window is not None:
            at = int(window.__array_interface__["data"][0]) - self.start
            if not 0 <= at < self.rows.nbytes or not window.flags.c_contiguous:
                return
            first, size = at, min(window.nbytes, self.rows.nbytes - at)
        page = mmap.PAGESIZE
        first += self.offset
        lo, hi = -(-first // page) * page, (first + size) // page * page  # whole pages inside the window only
        if hi > lo:
            self.mapping.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def _opened(rows: Vectors) -> tuple[IO[bytes], int] | None:
    """The file of a matrix np.load mapped (`np.memmap`), opened for reading, and where its rows start."""
    name = getattr(rows, "filename", None)
    if not isinstance(rows, np.memmap) or name is None or not rows.flags.c_contiguous:
        return None
    try:
        return open(name, "rb"), int(rows.offset)  # held open as long as the rows are
    except OSError:
        return None


def _read_fully(fd: int, target: memoryview, position: int) -> None:
    while len(target):
        got = os.preadv(fd, [target], position)
        if got <= 0:
            raise OSError(f"the rows' file ended at byte {position}")
        target, position = target[got:], position + got


class Spilled:
    """Rows in an unnamed temporary file, mapped shared and writable (of the rows' own dtype)."""

    def __init__(self, handle: IO[bytes], mapping: mmap.mmap, rows: Vectors) -> None:
        self.handle, self.pages = handle, Pages(mapping, rows, 0, (handle, 0))

    @property
    def rows(self) -> Vectors:
        return self.pages.rows

    @classmethod
    def write(cls, folder: Path, rows: Vectors) -> Spilled:
        folder.mkdir(parents=True, exist_ok=True)
        handle = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 (held open as long as the rows are)
        try:
            handle.write(np.ascontiguousarray(rows).reshape(-1).view(np.uint8).data)
            handle.flush()
            mapping = mmap.mmap(handle.fileno(), rows.nbytes, access=mmap.ACCESS_WRITE)
        except BaseException:
            handle.close()
            raise
        return cls(handle, mapping, np.frombuffer(mapping, dtype=rows.dtype).reshape(rows.shape))
