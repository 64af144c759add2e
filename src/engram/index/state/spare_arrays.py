"""Memory for a patched view's largest arrays, used again once no view reads it.

A patch writes the new view's edge arrays afresh (engram.index.view.edges): at 100k passages its column indices,
weights and walk values are about 110 MB. Memory that large comes from the system as new pages, and the first
write to each page stops the writer while the system supplies it: on this project's machines that cost more
than the copy itself, and varied from one patch to the next (bench/README.md, "Patched arrays written into
memory used before"). The view before last held arrays of the same sizes; once nothing reads them, the next
patch writes into that memory instead.

Each array handed out is a root array over a buffer kept here, and every view of it (slices, the matrices and
row blocks made of it) refers to that root, so the buffer is free exactly when a weak reference to the root
is dead: no view, however old, and no reader still holding one, can see a buffer written again.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

HEADROOM = 64  # a fresh buffer holds 1/64 more than asked, so the next patches (a few more entries) fit it
LOOSE = 1.125  # a free buffer serves an array of at least 1 / LOOSE of its size (smaller: a fresh one)
KEEP_FREE = 8  # free buffers kept at most (the newest): two views' worth of the arrays a patch writes


@dataclass(eq=False)  # compared by identity (a weak reference compares its arrays)
class _Buffer:
    memory: bytearray
    root: weakref.ref[npt.NDArray[np.generic]] | None  # the array handed out last (None: never)

    def free(self) -> bool:
        return self.root is None or self.root() is None


class Spares:
    """Buffers for the arrays of patched views, written again once their last view is gone."""

    def __init__(self) -> None:
        self._buffers: list[_Buffer] = []
        self._lock = threading.Lock()

    def empty(self, size: int, dtype: npt.DTypeLike) -> npt.NDArray[np.generic]:
        """An array of `size` elements of `dtype` (contents undefined, like `np.empty`), over a free buffer of
        about its size when one is kept, else over a new one."""
        kind = np.dtype(dtype)
        need = size * kind.itemsize
        with self._lock:
            buffer = next(
                (b for b in self._buffers if b.free() and need <= len(b.memory) <= need * LOOSE + kind.itemsize),
                None,
            )
            if buffer is None:
                buffer = _Buffer(bytearray(need + need // HEADROOM + kind.itemsize), None)
                self._buffers.append(buffer)
            array: npt.NDArray[np.generic] = np.frombuffer(buffer.memory, dtype=kind, count=size)
            buffer.root = weakref.ref(array)
            self._buffers.remove(buffer)
            self._buffers.append(buffer)  # the newest last
            free = [b for b in self._buffers if b.free()]
            for old in free[: max(0, len(free) - KEEP_FREE)]:
                self._buffers.remove(old)
        return array

    def held(self) -> tuple[int, int, int]:
        """(buffers in use, free buffers, bytes of the free ones). Free buffers past `KEEP_FREE` are let go at
        the next `empty`."""
        with self._lock:
            free = [b for b in self._buffers if b.free()]
            return len(self._buffers) - len(free), len(free), sum(len(b.memory) for b in free)
