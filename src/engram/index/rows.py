"""Row storage of the live state: a growable float32 matrix, and the alive keys of one kind in canonical order."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from engram.types import Triple

Vectors = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


class Rows:
    """A growable float32 matrix (capacity grows by half: the slack of a large memory's vectors is RAM)."""

    def __init__(self, dim: int) -> None:
        self.data = np.zeros((16, dim), dtype=np.float32)
        self.size = 0

    def append(self, vectors: Vectors) -> None:
        need = self.size + len(vectors)
        if need > len(self.data):
            grown = np.zeros((max(need, len(self.data) + len(self.data) // 2), self.data.shape[1]), dtype=np.float32)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : need] = vectors
        self.size = need

    def view(self) -> Vectors:
        return self.data[: self.size]

    def adopt(self, matrix: Vectors) -> None:
        """Hold `matrix` as the rows (not copied: a copy-on-write memory map of a saved state stays one; the
        first append beyond it copies into memory)."""
        self.data, self.size = matrix, len(matrix)


K = TypeVar("K", str, Triple)


class SortedKeys(Generic[K]):
    """The alive keys of one kind in sorted order, with their rows, refreshed lazily: `touch` a key whose
    aliveness may have changed; `keys(alive)` and `rows(alive)` apply the changes - a few by binary search and
    insertion, many by one merge of two sorted runs - instead of re-sorting or looking every key up again."""

    BULK = 64  # more changes than this at once: merge and look the rows up again

    def __init__(self, row_of: Mapping[K, int]) -> None:
        self._row_of: Mapping[K, int] = row_of  # a key's row never changes
        self._keys: list[K] = []
        self._rows: IntArray = np.zeros(0, dtype=np.int64)
        self._member = np.zeros(0, dtype=bool)  # by row: the key is in `_keys` (no set of every key)
        self._touched: set[K] = set()

    def touch(self, key: K) -> None:
        self._touched.add(key)

    def keys(self, alive: Callable[[K], bool]) -> list[K]:
        self._refresh(alive)
        return self._keys

    def rows(self, alive: Callable[[K], bool]) -> IntArray:
        """The rows of `keys(alive)`, in the same order (a new array after each change, never mutated)."""
        self._refresh(alive)
        return self._rows

    def restore(self, rows: IntArray, key_of: Callable[[int], K]) -> None:
        """Take a saved order (the rows of the alive keys, by key) without sorting: nothing touched since."""
        self._keys = list(map(key_of, rows.tolist()))
        self._rows = rows.astype(np.int64)
        self._member = np.zeros(int(rows.max()) + 1 if len(rows) else 0, dtype=bool)
        self._member[self._rows] = True
        self._touched = set()

    def _is_member(self, key: K) -> bool:
        row = self._row_of[key]
        return row < len(self._member) and bool(self._member[row])

    def _refresh(self, alive: Callable[[K], bool]) -> None:
        if not self._touched:
            return
        gone = sorted(k for k in self._touched if self._is_member(k) and not alive(k))
        fresh = sorted(k for k in self._touched if not self._is_member(k) and alive(k))
        self._touched = set()
        if len(gone) + len(fresh) > self.BULK:
            dropped = set(gone)
            kept = [k for k in self._keys if k not in dropped] if gone else self._keys
            self._keys = sorted(kept + fresh) if fresh else kept
            self._rows = np.fromiter(map(self._row_of.__getitem__, self._keys), np.int64, count=len(self._keys))
        else:
            if gone:
                at = [bisect_left(self._keys, k) for k in gone]
                for i in reversed(at):
                    del self._keys[i]
                self._rows = np.delete(self._rows, at)
            if fresh:
                at = [bisect_left(self._keys, k) for k in fresh]
                for i, k in zip(reversed(at), reversed(fresh)):
                    self._keys.insert(i, k)
                self._rows = np.insert(self._rows, at, [self._row_of[k] for k in fresh])
        rows = [self._row_of[k] for k in fresh]
        if rows and max(rows) >= len(self._member):
            grown = np.zeros(max(max(rows) + 1, len(self._member) + len(self._member) // 2), dtype=bool)
            grown[: len(self._member)] = self._member
            self._member = grown
        self._member[[self._row_of[k] for k in gone]] = False
        self._member[rows] = True
