"""Lookups by key over a restored state's saved arrays: a fact's row by its (subject, relation, object), and a
phrase pair's relation count. A restore keeps the arrays it read and makes no dict of a million entries; a
write looks its few keys up by binary search, and what it adds or changes lives in a small dict beside them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

from engram.graph.pair_arrays import SHIFT, merge_sorted, pair_keys, pairs_of
from engram.index.state.key_rows import SearchedRows
from engram.types import Triple

IntArray = npt.NDArray[np.int64]
Pair = tuple[int, int]


class FactRows(MutableMapping[Triple, int], SearchedRows[Triple]):
    """Fact key -> row. The saved facts are their phrase rows and relation ids, sorted once by the first lookup
    (O(facts) in numpy); facts added since are a dict. Rows never change and facts are never removed."""

    def __init__(self) -> None:
        self._added: dict[Triple, int] = {}
        self._phrases: Sequence[str] = ()
        self._phrase_row: Mapping[str, int] = {}
        self._relations: Sequence[str] = ()
        self._pairs: IntArray = np.zeros((0, 2), dtype=np.int64)
        self._verbs: IntArray = np.zeros(0, dtype=np.int64)
        self._index: tuple[IntArray, IntArray, IntArray, int, dict[str, int]] | None = None

    def restore(
        self,
        phrases: Sequence[str],
        phrase_row: Mapping[str, int],
        relations: Sequence[str],
        pairs: IntArray,
        verbs: IntArray,
    ) -> None:
        """Take the saved facts (rows 0..n-1): `pairs` (n, 2) rows of `phrases` (whose rows `phrase_row` gives),
        `verbs` ids into `relations` (distinct strings)."""
        if self._added or len(self._pairs):
            raise ValueError("facts are already held")
        self._phrases, self._phrase_row, self._relations = phrases, phrase_row, relations
        self._pairs, self._verbs = pairs.astype(np.int64, copy=False), verbs.astype(np.int64, copy=False)
        self._index = None

    def _sorted(self) -> tuple[IntArray, IntArray, IntArray, int, dict[str, int]]:
        """(sorted subject/object keys, their rows, their relation ids, the key's base, relation -> id)."""
        if self._index is None:
            base = int(self._pairs.max()) + 1 if len(self._pairs) else 1
            keys = self._pairs[:, 0] * base + self._pairs[:, 1]
            order = np.argsort(keys, kind="stable")
            verb_id = {r: i for i, r in enumerate(self._relations)}
            self._index = (keys[order], order.astype(np.int64), self._verbs[order], base, verb_id)
        return self._index

    def _saved_row(self, key: Triple) -> int | None:
        if not len(self._pairs):
            return None
        keys, rows, verbs, base, verb_id = self._sorted()
        subject, obj, verb = self._phrase_row.get(key[0]), self._phrase_row.get(key[2]), verb_id.get(key[1])
        if subject is None or obj is None or verb is None or subject >= base or obj >= base:
            return None
        wanted = subject * base + obj
        at = int(np.searchsorted(keys, wanted))
        while at < len(keys) and keys[at] == wanted:
            if verbs[at] == verb:
                return int(rows[at])
            at += 1
        return None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 3 and self.get(key) is not None

    def __setitem__(self, key: Triple, row: int) -> None:
        if key in self._added or self._saved_row(key) is not None:
            raise ValueError(f"fact {key} already has a row")
        self._added[key] = row

    def __delitem__(self, key: Triple) -> None:
        raise TypeError("fact rows are never removed")

    def __iter__(self) -> Iterator[Triple]:
        names, verbs = self._phrases, self._relations
        for (subject, obj), verb in zip(self._pairs.tolist(), self._verbs.tolist()):
            yield names[subject], verbs[verb], names[obj]
        yield from self._added

    def __len__(self) -> int:
        return len(self._pairs) + len(self._added)


class PairCounts(MutableMapping[Pair, int]):
    """Phrase pair (i < j) -> the alive facts joining it. The saved pairs are sorted keys and counts; changes
    since the restore are a dict (0: taken away), so a build from nothing keeps a dict as before and a restored
    memory's few changes search the arrays."""

    def __init__(self) -> None:
        self._keys: IntArray = np.zeros(0, dtype=np.int64)
        self._counts: IntArray = np.zeros(0, dtype=np.int64)
        self._changed: dict[Pair, int] = {}
        self._size = 0

    def restore(self, pairs: IntArray, counts: IntArray) -> None:
        """Take saved pairs (R x 2, each i < j) and their counts (each > 0), in any order."""
        if len(pairs) != len(counts):
            raise ValueError("relation tables disagree")
        keys = pair_keys(pairs.reshape(-1, 2).astype(np.int64, copy=False))
        counts = counts.astype(np.int64, copy=False)
        if len(keys) > 1 and not bool((keys[1:] > keys[:-1]).all()):
            order = np.argsort(keys, kind="stable")
            keys, counts = keys[order], counts[order]
            if bool((keys[1:] == keys[:-1]).any()):
                raise ValueError("relation pairs are saved twice")
        if len(counts) and int(counts.min()) <= 0:
            raise ValueError("relation counts are not positive")
        self._keys, self._counts, self._changed, self._size = keys, counts, {}, len(keys)

    def _saved(self, pair: Pair) -> int:
        if not len(self._keys):
            return 0
        key = pair[0] * SHIFT + pair[1]
        at = int(np.searchsorted(self._keys, key))
        return int(self._counts[at]) if at < len(self._keys) and self._keys[at] == key else 0

    @overload  # type: ignore[override]
    def get(self, pair: Pair) -> int | None: ...
    @overload
    def get(self, pair: Pair, default: int) -> int: ...
    def get(self, pair: Pair, default: int | None = None) -> int | None:
        count = self._changed.get(pair)
        if count is None:
            count = self._saved(pair)
        return count if count else default

    def __getitem__(self, pair: Pair) -> int:
        count = self.get(pair)
        if count is None:
            raise KeyError(pair)
        return count

    def __contains__(self, pair: object) -> bool:
        return isinstance(pair, tuple) and len(pair) == 2 and self.get(pair) is not None

    def __setitem__(self, pair: Pair, count: int) -> None:
        if count <= 0:
            raise ValueError("a relation count is positive (delete the pair instead)")
        if self.get(pair) is None:
            self._size += 1
        self._changed[pair] = count

    def __delitem__(self, pair: Pair) -> None:
        if self.get(pair) is None:
            raise KeyError(pair)
        self._size -= 1
        self._changed[pair] = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Pair]:
        pairs, _ = self.arrays()
        return iter(map(tuple, pairs.tolist()))

    def arrays(self) -> tuple[IntArray, IntArray]:
        """The pairs (R x 2) sorted by (i, j), and their counts: the saved arrays with the changes merged in
        (the saved arrays themselves when nothing changed)."""
        if not self._changed:
            return pairs_of(self._keys), self._counts
        size = len(self._changed)
        flat = np.fromiter(itertools.chain.from_iterable(self._changed), dtype=np.int64, count=2 * size)
        changed = pair_keys(flat.reshape(-1, 2))
        counts = np.fromiter(self._changed.values(), dtype=np.int64, count=size)
        order = np.argsort(changed)
        changed, counts = changed[order], counts[order]
        alive = counts > 0
        base = self._counts.astype(np.float64)
        keys, merged = merge_sorted(self._keys, base, changed, changed[alive], counts[alive].astype(np.float64))
        return pairs_of(keys), merged.astype(np.int64)
