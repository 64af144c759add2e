"""Query-to-phrase linking by name: the phrase nodes whose text occurs in the query.

The query and every alive phrase are folded the same way (`fold`: `normalize_phrase`, then accents removed,
so "Aschenbrodel" finds "aschenbrödel"). The query's words are scanned left to right; at each position the
longest word n-gram that is a phrase name is taken and its words are consumed, so "26th Chess Olympiad" links
the node "26th chess olympiad" and not also "chess olympiad".

Each linked phrase is weighted by how specific it is, measured in the graph: the inverse document frequency
of its rarest word over the passages (a passage "contains" a word when one of its phrase nodes does),
scaled to [0, 1] by log(passages + 1), divided by the number of passages the phrase itself occurs in (the
paper's node specificity). Common words ("country", "city") link with a small weight, names with a large
one. The names and word counts are kept by the index as phrases come and go (`engram.index.state.phrase_names`), so a
new view's `PhraseLookup` costs nothing to make.

The same scan over a seeded phrase's own name finds the phrase nodes named inside it (`inner_seeds`), which
the default method seeds at a fraction of their parent's weight (`retrieve.inner_name_weight`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram.index.state.phrase_names import NameSnapshot, fold, folded_key
from engram.index.view.graph_index import GraphIndex

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
__all__ = ["PhraseLookup", "build_lookup", "fold", "inner_seeds", "link_seeds", "lookup_for"]


@dataclass(frozen=True)
class _NameRows:
    """Folded phrase name -> the view's alive rows with that name (ascending); absent names raise KeyError."""

    names: NameSnapshot
    alive: BoolArray

    def __getitem__(self, name: str) -> tuple[int, ...]:
        rows = self.names.rows(name, self.alive)
        if not rows:
            raise KeyError(name)
        return rows

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.names.has(name, self.alive)


@dataclass(frozen=True)
class PhraseLookup:
    """Folded phrase name -> alive phrase rows; the longest name in words; per-word passage counts. Reads the
    view's `NameSnapshot` (kept by the index as phrases come and go), so making one costs nothing."""

    names: NameSnapshot
    alive: BoolArray
    passages: int

    @property
    def rows(self) -> _NameRows:
        return _NameRows(self.names, self.alive)

    @property
    def longest(self) -> int:
        return self.names.longest

    def link(self, query: str) -> list[str]:
        """Folded names found in `query`, longest match first at each position, each name once."""
        words = fold(query).split()
        return self._scan(words, self.longest)

    def inside(self, key: str) -> list[str]:
        """Folded names found inside the name of the phrase key `key` (normalised, as the graph keeps it), itself
        left out, as `link` finds them: "west chicago high school" holds "west chicago" when that is a phrase
        name."""
        words = folded_key(key).split()
        return self._scan(words, min(self.longest, len(words) - 1))

    def _scan(self, words: list[str], longest: int) -> list[str]:
        """Names of at most `longest` words in `words`, left to right, the longest at each position."""
        names, alive = self.names, self.alive
        found: dict[str, None] = {}
        i = 0
        while i < len(words):  # no name is longer than the longest that starts with the word at i
            for size in range(min(longest, names.longest_from(words[i]), len(words) - i), 0, -1):
                name = " ".join(words[i : i + size])
                if names.has(name, alive):
                    found[name] = None
                    i += size
                    break
            else:
                i += 1
        return list(found)

    def specificity(self, name: str) -> float:
        """IDF of the name's rarest word over the passages, scaled to [0, 1]."""
        scale = math.log(self.passages + 1.0)
        if scale <= 0:
            return 0.0
        rarest = min(self.names.passages_with(w) for w in name.split())
        return max(math.log((self.passages + 1.0) / (rarest + 1.0)), 0.0) / scale


def build_lookup(index: GraphIndex) -> PhraseLookup:
    return PhraseLookup(index.names, index.phrase_alive, int(index.passage_alive.sum()))


def lookup_for(index: GraphIndex) -> PhraseLookup:
    """The view's lookup, built once (by the first reader, or by the writer that derived the view) and kept
    while the view lives."""
    return index.memo("phrase_lookup", lambda: build_lookup(index))


def link_seeds(
    index: GraphIndex, queries: Sequence[str], keep: Callable[[str, list[str]], list[str]] | None = None
) -> list[tuple[IntArray, FloatArray]]:
    """Per query: the linked phrase rows and their weights (specificity / passages containing the phrase).
    `keep(query, names)` narrows the linked names (engram.retrieve.named.named_only)."""
    lookup = lookup_for(index)
    counts = index.phrase_passage_counts  # read at the linked rows only: no pass over every phrase per query
    out: list[tuple[IntArray, FloatArray]] = []
    for query in queries:
        rows: list[int] = []
        weights: list[float] = []
        names = lookup.link(query)
        _weigh(lookup, keep(query, names) if keep is not None else names, counts, 1.0, rows, weights)
        out.append((np.array(rows, dtype=np.int64), np.array(weights, dtype=np.float64)))
    return out


def _weigh(
    lookup: PhraseLookup, names: Sequence[str], counts: FloatArray, scale: float, rows: list[int], weights: list[float]
) -> None:
    """Append each name's alive rows and their weights, `scale` x specificity / passages containing the row
    (at least 1)."""
    for name in names:
        weight = scale * lookup.specificity(name)
        for row in lookup.rows[name]:
            rows.append(row)
            weights.append(weight / max(float(counts[row]), 1.0))


def inner_seeds(index: GraphIndex, rows: IntArray, weights: FloatArray) -> tuple[IntArray, FloatArray]:
    """The phrase nodes named inside the names of phrase `rows` (`PhraseLookup.inside`), each weighted as a
    query link is (specificity / passages containing it) times the weight of the row whose name holds it. A
    bridge often enters a fact inside a longer name: "Fawell is a graduate of West Chicago High School" seeds
    "west chicago high school", and the city's page is a node away from "west chicago" alone."""
    lookup = lookup_for(index)
    counts = index.phrase_passage_counts
    out_rows: list[int] = []
    out_weights: list[float] = []
    for row, weight in zip(rows.tolist(), weights.tolist()):
        _weigh(lookup, lookup.inside(index.tables.phrases[row]), counts, weight, out_rows, out_weights)
    return np.array(out_rows, dtype=np.int64), np.array(out_weights, dtype=np.float64)
