"""Key -> row of an append-only list of distinct strings (phrase keys, name words), without a dict of every key
after a restore.

A dict of a million strings costs about half a second to build at open (each string hashed and inserted), and
a saved state would pay that for every phrase and every name word. `KeyRows` instead takes back, with the
list, a saved table of 64-bit hashes of its keys (BLAKE2b of the UTF-8 bytes, so the same in every process),
sorted, with the row of each: a lookup hashes the key, finds the hash by binary search and compares the
string at each row of that hash (collisions cost a comparison, never a wrong row). Keys added after the restore
go to a dict as before, so a memory built in one process looks nothing up by hash. `saved()` gives the table
for every key, hashing only those added since the table was last made (a bulk pass over the new keys).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import TypeVar

import numpy as np
import numpy.typing as npt

HashArray = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
K = TypeVar("K", bound=Hashable)


def key_hash(key: str) -> int:
    """The 64-bit hash under which `key` is saved (BLAKE2b, 8 bytes, little-endian)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")


def key_hashes(keys: Iterable[str], count: int) -> HashArray:
    """`key_hash` of each of `count` keys, as an array."""
    return np.fromiter(map(key_hash, keys), dtype=np.uint64, count=count)


class SearchedRows(Mapping[K, int]):
    """Key -> row where the restored keys are searched in saved arrays (`_saved_row`) and the keys added since
    are a dict (`_added`): the lookups of `KeyRows` and `engram.index.state.fact_pair_keys.FactRows`."""

    _added: dict[K, int]

    def _saved_row(self, key: K) -> int | None:
        raise NotImplementedError

    def get(self, key: K, default: int | None = None) -> int | None:  # type: ignore[override]
        row = self._added.get(key)
        if row is None:
            row = self._saved_row(key)
        return default if row is None else row

    def __getitem__(self, key: K) -> int:
        row = self.get(key)
        if row is None:
            raise KeyError(key)
        return row


class KeyRows(SearchedRows[str]):
    """Key -> row for `keys` (the caller's list, shared: the caller appends a key and sets its row here, which
    must be its index in the list). Keys are never removed and never change row."""

    def __init__(self, keys: list[str]) -> None:
        self.listed = keys
        self._added: dict[str, int] = {}  # keys set since the restore (all of them when nothing was restored)
        # (the hashed keys' hashes, sorted; the row of each; a memoryview of each, which a binary search reads
        # as Python ints, about twice as fast as numpy's scalars): one attribute, replaced whole by `saved`, so a
        # reader on another thread never pairs one table's hashes with another's rows
        self._table = _searched(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))
        self._restored = 0  # rows 0.._restored-1 are found through the hashes, not the dict
        self._hashed = 0  # rows 0.._hashed-1 are in `_table` (restored, or hashed by `saved`)

    def restore(self, count: int, table: tuple[HashArray, IntArray] | None) -> None:
        """Take the first `count` keys of the list (the restored ones, distinct) with their saved table (from
        `saved()`); without one (a state saved before the tables) they go to the dict, as keys added here do,
        and are hashed by the next `saved()`."""
        if self._added or self._restored:
            raise ValueError("keys are already held")
        if count > len(self.listed):
            raise ValueError("more saved keys than listed")
        if table is None:
            self._added = dict(zip(self.listed[:count], range(count)))
            if len(self._added) != count:
                raise ValueError("saved keys are not distinct")
            return
        hashes, rows = np.asarray(table[0], dtype=np.uint64), np.asarray(table[1], dtype=np.int64)
        if len(hashes) != count or len(rows) != count:
            raise ValueError("saved key table does not fit the keys")
        if count and (np.any(hashes[1:] < hashes[:-1]) or np.any(np.bincount(rows, minlength=count) != 1)):
            raise ValueError("saved key table is not sorted hashes of every key once")
        self._table = _searched(hashes, rows)
        self._restored = self._hashed = count

    def _saved_row(self, key: str) -> int | None:
        if not self._restored:
            return None
        wanted, (_, _, hashes, rows) = key_hash(key), self._table
        at = bisect.bisect_left(hashes, wanted)
        while at < len(hashes) and hashes[at] == wanted:
            row = int(rows[at])
            if row < self._restored and self.listed[row] == key:
                return row
            at += 1
        return None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __setitem__(self, key: str, row: int) -> None:
        self._added[key] = row

    def __len__(self) -> int:
        return self._restored + len(self._added)

    def __iter__(self) -> Iterator[str]:
        yield from self.listed[: self._restored]
        yield from self._added

    def saved(self) -> tuple[HashArray, IntArray]:
        """(sorted hashes, the row of each) of every key: the rows hashed before, merged with the keys added
        since (hashed now, once: the table is kept for the next call)."""
        size = len(self)
        if size > self._hashed:
            fresh = key_hashes(self.listed[self._hashed : size], size - self._hashed)
            hashes = np.concatenate([self._table[0], fresh])
            rows = np.concatenate([self._table[1], np.arange(self._hashed, size, dtype=np.int64)])
            order = np.argsort(hashes, kind="stable")
            self._table = _searched(hashes[order], rows[order])
            self._hashed = size
        return self._table[0].copy(), self._table[1].copy()


def _searched(hashes: HashArray, rows: IntArray) -> tuple[HashArray, IntArray, memoryview, memoryview]:
    """A key table with a memoryview of each array (what `KeyRows._saved_row` searches)."""
    return hashes, rows, hashes.data, rows.data
