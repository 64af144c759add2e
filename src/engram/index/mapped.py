"""Rows held in file mappings: a memory-mapped snapshot's pages given back to the kernel, and rows moved out of
RAM to an unnamed temporary file."""

from __future__ import annotations

import ctypes
import mmap
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

    def __init__(self, mapping: mmap.mmap, rows: Vectors, offset: int) -> None:
        self.mapping, self.rows, self.offset = mapping, rows, offset
        self.start = int(rows.__array_interface__["data"][0])

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
        return cls(mapping, rows, offset) if 0 <= offset <= len(mapping) - rows.nbytes else None

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


class Spilled:
    """Rows in an unnamed temporary file, mapped shared and writable."""

    def __init__(self, handle: IO[bytes], mapping: mmap.mmap, rows: Vectors) -> None:
        self.handle, self.pages = handle, Pages(mapping, rows, 0)

    @property
    def rows(self) -> Vectors:
        return self.pages.rows

    @classmethod
    def write(cls, folder: Path, rows: Vectors) -> Spilled:
        folder.mkdir(parents=True, exist_ok=True)
        handle = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 (held open as long as the rows are)
        try:
            handle.write(np.ascontiguousarray(rows, dtype=np.float32).reshape(-1).view(np.uint8).data)
            handle.flush()
            mapping = mmap.mmap(handle.fileno(), rows.nbytes, access=mmap.ACCESS_WRITE)
        except BaseException:
            handle.close()
            raise
        return cls(handle, mapping, np.frombuffer(mapping, dtype=np.float32).reshape(rows.shape))
