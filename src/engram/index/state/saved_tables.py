"""A restored state's per-row tables kept as the saved arrays until something reads or changes them: each
passage's fact rows (`RowSets`), each fact's phrase pair (`Pairs`) and strings (`Triples`). A restore of a
100k-passage memory then makes none of the million tuples and sets these hold; a write makes what it touches."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

import numpy as np
import numpy.typing as npt

from engram.types import Triple

IntArray = npt.NDArray[np.int64]
T = TypeVar("T")


class _Rows(Sequence[T]):
    """Slices and negative indices over `_at` (the entry at a row in range) and `__len__`."""

    def _at(self, index: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("row out of range")
        return self._at(index)


class Triples(_Rows[Triple]):
    """Each fact's (subject, relation, object): the saved arrays (phrase rows and relation ids) read through the
    shared phrase and relation strings, then the facts appended since as tuples. A restore makes no tuple; a
    read makes those it shows (a query's top facts), `listed` makes them all at once (a write's lookups)."""

    def __init__(self) -> None:
        self._phrases: Sequence[str] = []
        self._relations: list[str] = []
        self._pairs: IntArray = np.zeros((0, 2), dtype=np.int64)
        self._verbs: IntArray = np.zeros(0, dtype=np.int64)
        self._added: list[Triple] = []
        self._tuples: list[Triple] | None = None  # the saved facts as tuples, once `saved` made them

    def restore(self, phrases: Sequence[str], relations: list[str], pairs: IntArray, verbs: IntArray) -> None:
        """Take the saved facts: `pairs` (n, 2) rows of the append-only `phrases`, `verbs` ids into `relations`."""
        if len(self) or pairs.ndim != 2 or pairs.shape[1] != 2 or len(pairs) != len(verbs):
            raise ValueError("saved facts disagree")
        if len(pairs) and not (pairs.min() >= 0 and pairs.max() < len(phrases) and verbs.min() >= 0):
            raise ValueError("saved facts name phrases that are not saved")
        if len(verbs) and verbs.max() >= len(relations):
            raise ValueError("saved facts name relations that are not saved")
        self._phrases, self._relations = phrases, relations
        self._pairs, self._verbs = pairs.astype(np.int64, copy=False), verbs.astype(np.int64, copy=False)

    def __len__(self) -> int:
        return len(self._pairs) + len(self._added)

    def _at(self, index: int) -> Triple:
        if self._tuples is not None and index < len(self._tuples):
            return self._tuples[index]
        if index < len(self._pairs):
            subject, obj = self._pairs[index].tolist()
            return self._phrases[subject], self._relations[int(self._verbs[index])], self._phrases[obj]
        return self._added[index - len(self._pairs)]

    def append(self, triple: Triple) -> None:
        self._added.append(triple)

    def saved(self) -> list[Triple]:
        """The saved facts as tuples, made once in one pass of array gathers and kept (a write's lookups, the
        fact -> row dict and the sorted fact order, all hold them)."""
        if self._tuples is None:
            names, verbs = np.array(self._phrases, dtype=object), np.array(self._relations, dtype=object)
            subjects, objects = names[self._pairs[:, 0]].tolist(), names[self._pairs[:, 1]].tolist()
            self._tuples = list(zip(subjects, verbs[self._verbs].tolist(), objects))
        return self._tuples

    def listed(self) -> list[Triple]:
        """Every fact as a tuple, in row order."""
        return [*self.saved(), *self._added]

    def __iter__(self) -> Iterator[Triple]:
        return iter(self.listed())

    def upto(self, count: int) -> TriplesView:
        """The first `count` facts, fixed (a view's facts, while the table grows with later commits)."""
        return TriplesView(self, count)


class TriplesView(_Rows[Triple]):
    """The first `count` facts of a `Triples` table (append-only, so they never change)."""

    def __init__(self, table: Triples, count: int) -> None:
        self._table, self._count = table, count

    def __len__(self) -> int:
        return self._count

    def _at(self, index: int) -> Triple:
        return self._table[index]

    def __iter__(self) -> Iterator[Triple]:
        return iter(self._table.listed()[: self._count])


class Prefix(_Rows[T]):
    """The first `count` entries of an append-only list, fixed while the list grows: a view's phrase names. A copy
    of the list would take a reference to each of its strings (0.9M at 100k passages, scattered in memory) at every
    view a commit derives."""

    def __init__(self, items: list[T], count: int) -> None:
        if not 0 <= count <= len(items):
            raise ValueError("a prefix longer than its list")
        self._items, self._count = items, count

    def __len__(self) -> int:
        return self._count

    def _at(self, index: int) -> T:
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self._count)


class Pairs:
    """The (subject row, object row) of each fact: the saved (n, 2) array, then the pairs appended since (a
    restore makes no tuple per fact; a write reads the few it needs)."""

    def __init__(self) -> None:
        self.saved: IntArray = np.zeros((0, 2), dtype=np.int64)
        self._added: list[tuple[int, int]] = []

    def restore(self, pairs: IntArray) -> None:
        if len(self) or pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError("fact pairs are restored into an empty table, as an (n, 2) array")
        self.saved = pairs.astype(np.int64, copy=False)

    def __len__(self) -> int:
        return len(self.saved) + len(self._added)

    def __getitem__(self, index: int) -> tuple[int, int]:
        if index < 0:
            index += len(self)
        if 0 <= index < len(self.saved):
            subject, obj = self.saved[index].tolist()
            return subject, obj
        return self._added[index - len(self.saved)]

    def append(self, pair: tuple[int, int]) -> None:
        self._added.append(pair)

    def added_since(self, count: int) -> list[tuple[int, int]]:
        """The pairs from position `count` on (`count` at least the saved array's length)."""
        if count < len(self.saved):
            raise ValueError("only appended pairs are listed")
        return self._added[count - len(self.saved) :]


class RowSets:
    """Each passage's fact rows as frozensets, kept as the saved (offsets, rows) arrays until a set is read or
    replaced: a restore makes none of the 100k's sets, a write makes those it touches."""

    def __init__(self) -> None:
        self._sets: list[frozenset[int] | None] = []
        self._offsets: IntArray = np.zeros(1, dtype=np.int64)
        self._rows: IntArray = np.zeros(0, dtype=np.int64)
        self._replaced: set[int] = set()  # saved positions given another set since the restore

    def restore(self, offsets: IntArray, rows: IntArray) -> None:
        """Take the sets saved as `rows[offsets[i]:offsets[i + 1]]` (after any appended before)."""
        if len(offsets) < 1 or int(offsets[-1]) != len(rows) or bool((np.diff(offsets) < 0).any()):
            raise ValueError("saved fact lists disagree")
        if self._sets:
            raise ValueError("fact lists are restored into an empty table only")
        self._offsets, self._rows = offsets.astype(np.int64), rows.astype(np.int64)
        self._sets = [None] * (len(offsets) - 1)

    def __len__(self) -> int:
        return len(self._sets)

    def __getitem__(self, index: int) -> frozenset[int]:
        found = self._sets[index]
        if found is None:
            index %= len(self._sets)  # the list took a negative index: the arrays want its position
            start, end = int(self._offsets[index]), int(self._offsets[index + 1])
            found = self._sets[index] = frozenset(self._rows[start:end].tolist())
        return found

    def __setitem__(self, index: int, value: frozenset[int]) -> None:
        self._sets[index] = value
        self._replaced.add(index % len(self._sets))

    def flat(self) -> tuple[IntArray, IntArray]:
        """(offsets, rows): each set's rows sorted, one after another, as `restore` takes them. The saved sets
        not replaced since are copied from the saved arrays as they are (which hold them sorted)."""
        saved = len(self._offsets) - 1
        fresh = sorted(i for i in self._replaced if i < saved) + list(range(saved, len(self._sets)))
        lengths = np.diff(self._offsets)
        lengths = np.concatenate([lengths, np.zeros(len(self._sets) - saved, dtype=np.int64)])
        pieces: list[IntArray] = []
        start = 0
        for index in fresh:
            pieces.append(self._rows[self._offsets[start] : self._offsets[min(index, saved)]])
            rows = np.array(sorted(self[index]), dtype=np.int64)
            lengths[index] = len(rows)
            pieces.append(rows)
            start = min(index + 1, saved)
        pieces.append(self._rows[self._offsets[start] : self._offsets[saved]])
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths, dtype=np.int64)])
        return offsets, np.concatenate(pieces).astype(np.int64, copy=False)

    def append(self, value: frozenset[int]) -> None:
        self._sets.append(value)

    def __iter__(self) -> Iterator[frozenset[int]]:
        return (self[i] for i in range(len(self._sets)))
