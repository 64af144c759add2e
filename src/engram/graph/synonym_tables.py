"""The tables behind the synonym lists (`engram.graph.synonyms`): each phrase's list, the rows whose lists hold a
phrase, and each edge's (lists holding it, cosine).

A memory opened from its saved state has these as arrays (`SavedLists`: the lists' rows, offsets, neighbours and
cosines). The tables read them by binary search and keep only what changes since in dicts beside them, so the
first change after opening a large memory touches a few lists instead of building a dict entry per list, per
listed phrase and per edge; a memory built in this process keeps plain dicts (nothing saved to read).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.graph.pair_arrays import SHIFT, pairs_of

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Neighbour = tuple[float, str, int]  # (cosine, key, row)
Pair = tuple[int, int]
Edge = tuple[int, float]  # (lists holding the pair, cosine)


class SavedLists:
    """Saved synonym lists: `rows` (increasing) with a list, `offsets` into `neighbours` and `sims`; `keys` are the
    phrases' keys by row. Rows whose saved list is empty (older states list them) are left out."""

    def __init__(self, arrays: dict[str, npt.NDArray[Any]], keys: Sequence[str]) -> None:
        rows, offsets = arrays["rows"].astype(np.int64), arrays["offsets"].astype(np.int64)
        size = len(arrays["neighbours"])
        if len(offsets) != len(rows) + 1 or int(offsets[-1]) != size or len(arrays["sims"]) != size:
            raise ValueError("saved synonym lists disagree")
        if len(rows) > 1 and not bool((rows[1:] > rows[:-1]).all()):
            raise ValueError("saved synonym lists are not in row order")
        filled = np.diff(offsets) > 0
        self.arrays, self.keys = dict(arrays), keys
        self.rows, self.starts, self.ends = rows[filled], offsets[:-1][filled], offsets[1:][filled]
        self.neighbours = arrays["neighbours"].astype(np.int64)
        self.sims = arrays["sims"].astype(np.float64)
        self._reverse: tuple[IntArray, IntArray] | None = None
        self._edges: tuple[IntArray, IntArray, FloatArray] | None = None

    def list_of(self, row: int) -> list[Neighbour] | None:
        at = int(np.searchsorted(self.rows, row))
        if at == len(self.rows) or int(self.rows[at]) != row:
            return None
        a, b = int(self.starts[at]), int(self.ends[at])
        keys = self.keys
        return [(s, keys[n], n) for s, n in zip(self.sims[a:b].tolist(), self.neighbours[a:b].tolist())]

    def owners(self) -> IntArray:
        """The row whose list holds each entry."""
        return np.repeat(self.rows, self.ends - self.starts)

    def holders(self, row: int) -> set[int]:
        """The rows whose saved lists hold `row`."""
        if self._reverse is None:
            order = np.argsort(self.neighbours, kind="stable")
            self._reverse = (self.neighbours[order], self.owners()[order])
        listed, owners = self._reverse
        return set(owners[np.searchsorted(listed, row) : np.searchsorted(listed, row, side="right")].tolist())

    def edges(self) -> tuple[IntArray, IntArray, FloatArray]:
        """Each listed pair once, sorted: (pair keys i * SHIFT + j with i < j, lists holding it, cosine of its
        last entry in row order, as a table built by going through the lists keeps)."""
        if self._edges is None:
            owner = self.owners()
            low, high = np.minimum(owner, self.neighbours), np.maximum(owner, self.neighbours)
            keys = low * SHIFT + high
            order = np.argsort(keys, kind="stable")  # equal pairs keep their saved order
            keys, sims = keys[order], self.sims[order]
            last = np.ones(len(keys), dtype=bool)
            last[:-1] = keys[1:] != keys[:-1]
            ends = np.flatnonzero(last)
            counts = np.diff(np.concatenate([np.full(1, -1, dtype=np.int64), ends]))
            self._edges = (keys[last], counts.astype(np.int64), sims[last])
        return self._edges


class ListTable(MutableMapping[int, list[Neighbour]]):
    """Phrase row -> its synonym list (rows without synonyms have no entry): the saved lists, read when asked
    for, and the lists set since (None: removed)."""

    def __init__(self, saved: SavedLists | None = None) -> None:
        self.saved = saved
        self._own: dict[int, list[Neighbour] | None] = {}
        self._size = len(saved.rows) if saved is not None else 0

    def get(self, row: int, default: Any = None) -> Any:
        if row in self._own:
            own = self._own[row]
            return default if own is None else own
        found = self.saved.list_of(row) if self.saved is not None else None
        return default if found is None else found

    def __getitem__(self, row: int) -> list[Neighbour]:
        found: list[Neighbour] | None = self.get(row)
        if found is None:
            raise KeyError(row)
        return found

    def __setitem__(self, row: int, neighbours: list[Neighbour]) -> None:
        if self.get(row) is None:
            self._size += 1
        self._own[row] = neighbours

    def __delitem__(self, row: int) -> None:
        if self.get(row) is None:
            raise KeyError(row)
        self._size -= 1
        self._own[row] = None

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[int]:
        saved = [] if self.saved is None else [r for r in self.saved.rows.tolist() if r not in self._own]
        return iter(sorted(itertools.chain(saved, (r for r, own in self._own.items() if own is not None))))

    def changed(self) -> bool:
        return bool(self._own)

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The lists as arrays (rows with a list, in order; offsets; neighbour rows; cosines): the saved entries
        of untouched rows copied as arrays, the lists set since added, all put in row order."""
        if self.saved is not None and not self._own:
            return dict(self.saved.arrays)
        parts: list[tuple[IntArray, IntArray, FloatArray]] = []  # (owner per entry, neighbours, sims)
        if self.saved is not None:
            owner = self.saved.owners()
            kept = ~np.isin(owner, np.fromiter(self._own, dtype=np.int64, count=len(self._own)))
            parts.append((owner[kept], self.saved.neighbours[kept], self.saved.sims[kept]))
        own = [(r, x) for r, items in sorted(self._own.items()) if items for x in items]
        own_rows = np.array([r for r, _ in own], dtype=np.int64)
        own_neighbours = np.array([x[2] for _, x in own], dtype=np.int64)
        parts.append((own_rows, own_neighbours, np.array([x[0] for _, x in own], dtype=np.float64)))
        owner, neighbours, sims = (np.concatenate([p[i] for p in parts]) for i in range(3))
        order = np.argsort(owner, kind="stable")  # a row's entries stay in their list's order
        owner, neighbours, sims = owner[order], neighbours[order], sims[order]
        rows, counts = np.unique(owner, return_counts=True)
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)]).astype(np.int64)
        return {"rows": rows.astype(np.int64), "offsets": offsets, "neighbours": neighbours, "sims": sims}


class IncomingTable:
    """Phrase row -> the rows whose lists hold it: the saved lists' reverse index, read when asked for, and the
    sets changed since."""

    def __init__(self, saved: SavedLists | None = None) -> None:
        self.saved = saved
        self._own: dict[int, set[int]] = {}

    def _set_of(self, row: int) -> set[int]:
        found = self._own.get(row)
        if found is None:
            found = self._own[row] = self.saved.holders(row) if self.saved is not None else set()
        return found

    def add(self, row: int, holder: int) -> None:
        self._set_of(row).add(holder)

    def discard(self, row: int, holder: int) -> None:
        self._set_of(row).discard(holder)

    def holders(self, row: int) -> list[int]:
        return list(self._set_of(row))

    def forget(self, row: int) -> None:
        self._own[row] = set()

    def listed(self) -> dict[int, set[int]]:
        """Every row held by some list, with its holders (built from all the lists: for tests)."""
        rows = set(self._own)
        if self.saved is not None:
            rows |= set(self.saved.neighbours.tolist())
        return {r: held for r in sorted(rows) if (held := set(self._set_of(r)))}


class EdgeTable(MutableMapping[Pair, Edge]):
    """Pair (i < j) -> (lists holding it, cosine): the saved lists' edges, read by binary search, and the entries
    set since (None: removed)."""

    def __init__(self, saved: SavedLists | None = None) -> None:
        self.saved = saved
        self._own: dict[Pair, Edge | None] = {}
        self._size: int | None = None if saved is not None else 0  # counted when first asked for

    def _saved_edge(self, pair: Pair) -> Edge | None:
        if self.saved is None:
            return None
        keys, counts, sims = self.saved.edges()
        key = pair[0] * SHIFT + pair[1]
        at = int(np.searchsorted(keys, key))
        return (int(counts[at]), float(sims[at])) if at < len(keys) and keys[at] == key else None

    def get(self, pair: Pair, default: Any = None) -> Any:
        if pair in self._own:
            own = self._own[pair]
            return default if own is None else own
        found = self._saved_edge(pair)
        return default if found is None else found

    def __getitem__(self, pair: Pair) -> Edge:
        found: Edge | None = self.get(pair)
        if found is None:
            raise KeyError(pair)
        return found

    def __setitem__(self, pair: Pair, edge: Edge) -> None:
        if self.get(pair) is None:
            self._size = len(self) + 1
        self._own[pair] = edge

    def __delitem__(self, pair: Pair) -> None:
        if self.get(pair) is None:
            raise KeyError(pair)
        self._size = len(self) - 1
        self._own[pair] = None

    def __len__(self) -> int:
        if self._size is None:
            assert self.saved is not None
            self._size = len(self.saved.edges()[0])
        return self._size

    def __iter__(self) -> Iterator[Pair]:
        saved: list[Pair] = []
        if self.saved is not None:
            saved = [p for p in map(tuple, pairs_of(self.saved.edges()[0]).tolist()) if p not in self._own]
        return iter(sorted(itertools.chain(saved, (p for p, own in self._own.items() if own is not None))))

    def saved_arrays(self) -> tuple[IntArray, FloatArray]:
        """The saved edges' sorted keys and cosines (empty when nothing was saved)."""
        if self.saved is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        keys, _, sims = self.saved.edges()
        return keys, sims
