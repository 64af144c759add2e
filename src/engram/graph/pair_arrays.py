"""Sorted arrays of a table of pairs that changes a few pairs at a time (the synonym edges).

A view of a large memory needs the synonym edges as arrays (pairs i < j in order, and their cosines) after every
commit; sorting every edge of the table again costs O(edges log edges) in Python objects each time (tens of ms
at 100k passages). `SortedPairs` keeps the arrays of the last call and the pairs marked since, and patches: the
marked pairs are taken out and those still in the table put back with their current value, in a few vectorised
copies. The result is the one a full sort gives, entry for entry (tests/test_pair_arrays.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Pair = tuple[int, int]
Table = Mapping[Pair, tuple[int, float]]  # pair -> (how many lists hold it, cosine)
A = TypeVar("A", IntArray, FloatArray)
SHIFT = np.int64(1 << 32)  # (a, b) -> a * SHIFT + b: one sortable key per pair (rows below 2**32)


class SortedPairs:
    """The arrays of a `{(i, j): (count, cosine)}` table, kept up to date by marking each pair whose entry
    changes."""

    def __init__(self) -> None:
        self._keys: IntArray | None = None  # sorted pair keys of the last arrays, or None (none made yet)
        self._values: FloatArray = np.zeros(0, dtype=np.float64)
        self._marked: set[Pair] = set()
        self._seed: Callable[[], tuple[IntArray, FloatArray]] | None = None

    def reset(self) -> None:
        """Forget the arrays (the table was replaced): the next call sorts the whole table."""
        self._keys, self._values, self._marked, self._seed = None, np.zeros(0, dtype=np.float64), set(), None

    def seed(self, arrays: Callable[[], tuple[IntArray, FloatArray]]) -> None:
        """Start from the table's arrays as `arrays()` will give them (sorted pair keys and values, read when
        first needed): the next call patches them by the pairs marked from now on instead of sorting the table."""
        self.reset()
        self._seed = arrays

    def mark(self, pair: Pair) -> None:
        """Note that `pair` was added, removed or changed in the table."""
        if self._keys is not None or self._seed is not None:
            self._marked.add(pair)

    def arrays(self, table: Table) -> tuple[IntArray, FloatArray]:
        """(pairs (n, 2), values) of `table` sorted by pair; read-only arrays, new ones after each change."""
        if self._seed is not None:
            keys, values = self._seed()
            self._keys, self._values, self._seed = _frozen(keys.copy()), _frozen(values.copy()), None
        if self._keys is None or len(self._marked) > max(1024, len(self._keys) // 4):
            self._keys, self._values = self._sorted(table)
        elif self._marked:
            self._keys, self._values = self._patched(self._keys, self._values, table)
        self._marked = set()
        pairs = pairs_of(self._keys)
        pairs.setflags(write=False)
        return pairs, self._values

    def _sorted(self, table: Table) -> tuple[IntArray, FloatArray]:
        keys = sorted(table)
        flat = np.fromiter(itertools.chain.from_iterable(keys), dtype=np.int64, count=2 * len(keys)).reshape(-1, 2)
        values = np.fromiter((table[k][1] for k in keys), dtype=np.float64, count=len(keys))
        return _frozen(pair_keys(flat)), _frozen(values)

    def _patched(self, keys: IntArray, values: FloatArray, table: Table) -> tuple[IntArray, FloatArray]:
        marked = sorted(self._marked)
        now = [p for p in marked if p in table]
        drop, add = (pair_keys(np.array(p, dtype=np.int64).reshape(-1, 2)) for p in (marked, now))
        keys, values = merge_sorted(keys, values, drop, add, np.array([table[p][1] for p in now], dtype=np.float64))
        return _frozen(keys), _frozen(values)


def pair_keys(pairs: IntArray) -> IntArray:
    """One sortable key per pair (rows below 2**32): a * SHIFT + b for each row (a, b) of `pairs` (n, 2)."""
    keys: IntArray = pairs[:, 0] * SHIFT + pairs[:, 1]
    return keys


def pairs_of(keys: IntArray) -> IntArray:
    """The (n, 2) pairs of `pair_keys`."""
    return np.column_stack([keys // SHIFT, keys % SHIFT]).reshape(-1, 2)


def merge_sorted(
    keys: IntArray, values: FloatArray, drop: IntArray, add: IntArray, add_values: FloatArray
) -> tuple[IntArray, FloatArray]:
    """Sorted `keys` (and their values) without the sorted `drop` keys and with the sorted `add` ones."""
    found = np.searchsorted(keys, drop)
    hit = found[(found < len(keys)) & (keys[np.minimum(found, len(keys) - 1)] == drop)] if len(keys) else found[:0]
    keys, values = np.delete(keys, hit), np.delete(values, hit)
    at = np.searchsorted(keys, add)
    return np.insert(keys, at, add), np.insert(values, at, add_values)


Plan = list[tuple[bool, int, int]]  # pieces of a spliced array: (from the old array, start, end)
R = TypeVar("R", bound=np.generic)


def splice_plan(keys: IntArray, drop: IntArray, add: IntArray) -> Plan:
    """How `merge_sorted` would splice sorted `keys`: the pieces, in order, of the old array (the runs between
    dropped keys and insertion points) and of the sorted `add` array. Applied by `splice` to any arrays that run
    along the keys (pairs, values), a few slice copies instead of a pass that computes keys or masks of every
    entry. `add` holds none of the keys that stay (a changed key is dropped and added again)."""
    found = np.searchsorted(keys, drop)
    ok = found < len(keys)
    ok[ok] = keys[found[ok]] == drop[ok]
    hits = set(found[ok].tolist())
    at = np.searchsorted(keys, add).tolist()
    plan: Plan = []
    start = taken = 0
    for position in sorted(hits.union(at)):
        plan.append((True, start, position))
        end = taken
        while end < len(at) and at[end] == position:
            end += 1
        plan.append((False, taken, end))
        start, taken = (position + 1 if position in hits else position), end
    plan.append((True, start, len(keys)))
    return [piece for piece in plan if piece[2] > piece[1]]


def splice(plan: Plan, old: npt.NDArray[R], new: npt.NDArray[R]) -> npt.NDArray[R]:
    """`old` spliced as `plan` says, with rows of `new` (same trailing shape) where the plan takes them."""
    if not plan:
        empty: npt.NDArray[R] = old[:0].copy()
        return empty
    out: npt.NDArray[R] = np.concatenate([(old if was_old else new)[a:b] for was_old, a, b in plan])
    return out


def _frozen(array: A) -> A:
    array.setflags(write=False)
    return array
