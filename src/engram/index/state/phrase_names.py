"""Folded phrase names and per-word passage counts for linking queries to phrase nodes (engram.retrieve.links),
kept as the state changes instead of rebuilt over every phrase for every view.

`fold` is the key under which a query's words meet phrase names: `normalize_phrase`, then combining marks
removed (NFKD), so "Aschenbrodel" finds "aschenbrödel". A phrase key is already normalised, so an ASCII key
is its own folded name and is found through the state's key -> row table; only keys that fold to something
else are held here (`other_rows`).

`NameTable` belongs to one `IndexState` and shares its append-only phrase list and key -> row table. It keeps,
for every phrase row, the ids of its folded name's words (appended as phrases appear), and for every word
the number of alive passages whose context holds a phrase with that word (`IndexState._tally` adds and takes
away each passage's share). The counts are built in one pass the first time a view asks for them (so opening
a memory does not pay for them) and kept up to date after that, and so is, for every word, the most words of a
name that starts with it (how far the query scan need look from that word: `NameSnapshot.longest_from`). A view
takes a `NameSnapshot`: a copy of the counts and a reference to the shared tables, which only grow; readers
filter rows by the view's size and alive mask, so a snapshot stays valid while later commits go on. Words get ids
through a `KeyRows` (engram.index.state.key_rows), saved with a table of their hashes, so opening a memory makes no dict
of every word.
"""

from __future__ import annotations

import unicodedata
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.index.state.key_rows import HashArray, KeyRows
from engram.text import normalize_phrase

IntArray = npt.NDArray[np.int64]
StartArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]


def fold(text: str) -> str:
    """`normalize_phrase`, then combining marks removed (NFKD): the key under which names are matched."""
    normal = normalize_phrase(text)
    if normal.isascii():  # no marks to remove, nothing for NFKD or NFC to change
        return normal
    decomposed = unicodedata.normalize("NFKD", normal)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


def folded_key(key: str) -> str:
    """`fold` of a phrase key (already normalised: an ASCII key is its own folded name)."""
    return key if key.isascii() else fold(key)


class NameTable:
    def __init__(self, phrases: list[str], phrase_row: Mapping[str, int]) -> None:
        self.phrases, self.phrase_row = phrases, phrase_row  # the state's, shared (append-only)
        self.other_rows: dict[str, tuple[int, ...]] = {}  # folded name -> rows, for keys that fold differently
        self.words: list[str] = []  # word id -> word
        self.word_ids = KeyRows(self.words)
        self.longest = 0  # most words in any phrase name seen (an upper bound for the alive ones)
        self._offsets = array("q", [0])  # phrase row -> its word ids in _words[offsets[row]:offsets[row + 1]]
        self._words = array("i")
        self._counts: IntArray | None = None  # word id -> alive passages containing it (None until asked)
        self._starts: StartArray | None = None  # word id -> most words of a name it starts (None until asked)

    def _catch_up(self) -> None:
        """Word ids of the phrases added since the last call."""
        for row in range(len(self._offsets) - 1, len(self.phrases)):
            key = self.phrases[row]
            name = folded_key(key)
            if name != key:
                self.other_rows[name] = (*self.other_rows.get(name, ()), row)
            words = name.split()
            self.longest = max(self.longest, len(words))
            for word in words:
                self._words.append(self._word_id(word))
            self._offsets.append(len(self._words))
            if words and self._starts is not None:
                self._note_start(self._words[self._offsets[-2]], len(words))

    def _note_start(self, word: int, size: int) -> None:
        """A name of `size` words starts with word id `word`."""
        starts = self._starts
        assert starts is not None
        if word >= len(starts):  # a grown copy: a snapshot keeps reading the one it was given
            starts = self._starts = np.concatenate([starts, np.zeros(max(len(starts), word + 1), dtype=np.int32)])
        if starts[word] < size:
            starts[word] = size

    def _start_table(self) -> StartArray:
        """Word id -> the most words of any phrase name (of every row so far) that starts with it, 0 for none."""
        offsets = np.frombuffer(self._offsets, dtype=np.int64)
        lengths = np.diff(offsets)
        filled = lengths > 0
        firsts = np.frombuffer(self._words, dtype=np.int32)[offsets[:-1][filled]]
        table = np.zeros(len(self.words), dtype=np.int32)
        np.maximum.at(table, firsts, lengths[filled].astype(np.int32))
        return table

    def _word_id(self, word: str) -> int:
        found = self.word_ids.get(word)
        if found is None:
            found = self.word_ids[word] = len(self.words)
            self.words.append(word)
        return found

    def tally(self, context: IntArray, sign: int) -> None:
        """Add (+1) or take away (-1) one alive passage's share: each distinct word of its context phrases."""
        if self._counts is None or not len(context):
            return
        self._catch_up()
        offsets, words = self._offsets, self._words
        seen = {w for p in context.tolist() for w in words[offsets[p] : offsets[p + 1]]}
        if seen and max(seen) >= len(self._counts):
            self._counts = np.concatenate([self._counts, np.zeros(len(self.word_ids), dtype=np.int64)])
        counts = self._counts
        for word in seen:
            counts[word] += sign

    def _bulk_counts(self, contexts: list[IntArray], alive: list[bool]) -> IntArray:
        """Word counts over the alive passages' contexts in one vectorised pass."""
        linked = [c for c, a in zip(contexts, alive) if a and len(c)]
        counts = np.zeros(len(self.word_ids), dtype=np.int64)
        if not linked:
            return counts
        phrases = np.concatenate(linked)
        passages = np.repeat(np.arange(len(linked), dtype=np.int64), [len(c) for c in linked])
        offsets = np.frombuffer(self._offsets, dtype=np.int64).copy()
        words = np.frombuffer(self._words, dtype=np.int32).astype(np.int64)
        starts, lengths = offsets[phrases], offsets[phrases + 1] - offsets[phrases]
        total = int(lengths.sum())
        shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        word_of = words[shift + np.arange(total, dtype=np.int64)]
        pairs = np.sort(np.repeat(passages, lengths) * len(self.word_ids) + word_of)
        first = np.ones(len(pairs), dtype=bool)
        first[1:] = pairs[1:] != pairs[:-1]  # each (passage, word) once
        counts += np.bincount(pairs[first] % len(self.word_ids), minlength=len(self.word_ids))
        return counts

    def saved(self) -> tuple[dict[str, object], dict[str, npt.NDArray[Any]]]:
        """The table as `engram.index.saved.state_file` saves it: (JSON-ready parts, arrays: copies, since a view of
        the growing buffers would stop them growing)."""
        self._catch_up()
        parts = {"words": self.words, "other_rows": self.other_rows, "longest": self.longest}
        hashes, rows = self.word_ids.saved()
        arrays: dict[str, npt.NDArray[Any]] = {
            "offsets": np.frombuffer(self._offsets, np.int64).copy(),
            "words": np.frombuffer(self._words, np.int32).copy(),
            "word_hashes": hashes,
            "word_rows": rows,
        }
        if self._counts is not None:
            arrays["counts"] = self._counts[: len(self.word_ids)]
        return parts, arrays

    def restore(self, parts: dict[str, Any], arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Take back what `saved` gave, for the same phrase rows (which the state has already filled); the
        words' hash table may be missing (a state saved before it: the words then go to a dict)."""
        offsets, ids, words = arrays["offsets"], arrays["words"], parts["words"]
        if len(offsets) != len(self.phrases) + 1 or (len(ids) and int(ids.max()) >= len(words)):
            raise ValueError("saved name table does not fit the phrases")
        if self.words:
            raise ValueError("words are already held")
        self.words.extend(map(str, words))
        table: tuple[HashArray, npt.NDArray[np.int64]] | None = None
        if "word_hashes" in arrays and "word_rows" in arrays:
            table = arrays["word_hashes"], arrays["word_rows"]
        self.word_ids.restore(len(self.words), table)
        self.other_rows = {str(name): tuple(int(r) for r in rows) for name, rows in parts["other_rows"].items()}
        self.longest = int(parts["longest"])
        self._offsets = array("q", offsets.astype(np.int64).tobytes())
        self._words = array("i", ids.astype(np.int32).tobytes())
        counts = arrays.get("counts")
        self._counts = None if counts is None else counts.astype(np.int64)

    def count(self, contexts: list[IntArray], alive: list[bool]) -> None:
        """Build the word counts from `contexts` and `alive` (the state's) unless they are kept already: a saved
        table then carries them, and the first view after opening need not count every passage again."""
        self._catch_up()
        if self._counts is None:
            self._counts = self._bulk_counts(contexts, alive)
        if self._starts is None:
            self._starts = self._start_table()

    def snapshot(self, contexts: list[IntArray], alive: list[bool]) -> NameSnapshot:
        """The counts as they stand (built from `contexts` and `alive`, the state's, on the first call)."""
        self.count(contexts, alive)
        assert self._counts is not None
        counts = self._counts[: len(self.word_ids)].copy()
        if len(counts) < len(self.word_ids):
            counts = np.concatenate([counts, np.zeros(len(self.word_ids) - len(counts), dtype=np.int64)])
        assert self._starts is not None
        return NameSnapshot(self, counts, self.longest, self._starts)


@dataclass(frozen=True)
class NameSnapshot:
    """A view's name lookup: the shared tables plus its own word counts."""

    table: NameTable
    word_passages: IntArray
    longest: int
    starts: StartArray  # word id -> most words of a name starting with it (an upper bound for the view's names)

    def longest_from(self, word: str) -> int:
        """The most words of a phrase name that starts with the folded `word` (an upper bound for the view's
        alive names, 0 when none starts with it): how far the query scan need look from that word."""
        word_id = self.table.word_ids.get(word)
        return int(self.starts[word_id]) if word_id is not None and word_id < len(self.starts) else 0

    def rows(self, name: str, alive: BoolArray) -> tuple[int, ...]:
        """Alive phrase rows (of a view with `len(alive)` phrases) whose folded name is `name`, ascending."""
        return tuple(sorted(self._alive_rows(name, alive)))

    def has(self, name: str, alive: BoolArray) -> bool:
        """Whether `rows(name, alive)` is not empty, without building it: the query scan asks this of every
        word n-gram, and most are no phrase's name (two dict lookups then, no generator)."""
        table, size = self.table, len(alive)
        row = table.phrase_row.get(name)
        if row is not None and row < size and alive[row]:
            return True
        others = table.other_rows.get(name)  # keys that fold to the name: rare
        return others is not None and any(r < size and alive[r] for r in others)

    def _alive_rows(self, name: str, alive: BoolArray) -> Iterator[int]:
        """The alive rows named `name`, unordered: the state's own row for the name, then the rows whose keys
        fold to it."""
        table, size = self.table, len(alive)
        row = table.phrase_row.get(name)
        if row is not None and row < size and alive[row]:
            yield row
        yield from (r for r in table.other_rows.get(name, ()) if r < size and alive[r])

    def passages_with(self, word: str) -> int:
        """Alive passages (of the view) whose context holds a phrase with this folded word."""
        word_id = self.table.word_ids.get(word)
        return int(self.word_passages[word_id]) if word_id is not None and word_id < len(self.word_passages) else 0
