"""Query-to-phrase linking by name: the phrase nodes whose text occurs in the query.

The query and every alive phrase are folded the same way (`fold`: `normalize_phrase`, then accents removed,
so "Aschenbrodel" finds "aschenbrödel"). The query's words are scanned left to right; at each position the
longest word n-gram that is a phrase name is taken and its words are consumed, so "26th Chess Olympiad" links
the node "26th chess olympiad" and not also "chess olympiad".

Each linked phrase is weighted by how specific it is, measured in the graph: the inverse document frequency
of its rarest word over the passages (a passage "contains" a word when one of its phrase nodes does),
scaled to [0, 1] by log(passages + 1), divided by the number of passages the phrase itself occurs in (the
paper's node specificity). Common words ("country", "city") link with a small weight, names with a large
one. A `PhraseLookup` is built once per index view (cached while the view lives).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram.index.view import GraphIndex
from engram.text import normalize_phrase

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def fold(text: str) -> str:
    """`normalize_phrase`, then combining marks removed (NFKD): the key under which names are matched."""
    decomposed = unicodedata.normalize("NFKD", normalize_phrase(text))
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


@dataclass(frozen=True)
class PhraseLookup:
    """Folded phrase name -> alive phrase rows; the longest name in words; per-word passage counts."""

    rows: dict[str, tuple[int, ...]]
    longest: int
    word_passages: dict[str, int]
    passages: int

    def link(self, query: str) -> list[str]:
        """Folded names found in `query`, longest match first at each position, each name once."""
        words = fold(query).split()
        found: dict[str, None] = {}
        i = 0
        while i < len(words):
            for size in range(min(self.longest, len(words) - i), 0, -1):
                name = " ".join(words[i : i + size])
                if name in self.rows:
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
        rarest = min(self.word_passages.get(w, 0) for w in name.split())
        return max(math.log((self.passages + 1.0) / (rarest + 1.0)), 0.0) / scale


def build_lookup(index: GraphIndex) -> PhraseLookup:
    rows: dict[str, list[int]] = {}
    words_of: list[list[str]] = []
    for row, phrase in enumerate(index.tables.phrases):
        name = fold(phrase) if index.phrase_alive[row] else ""
        words_of.append(name.split())
        if name:
            rows.setdefault(name, []).append(row)
    word_passages: dict[str, set[int]] = {}
    for passage, phrase in index.tables.context.tolist():
        for word in words_of[phrase]:
            word_passages.setdefault(word, set()).add(passage)
    longest = max((len(name.split()) for name in rows), default=0)
    return PhraseLookup(
        rows={k: tuple(v) for k, v in rows.items()},
        longest=longest,
        word_passages={w: len(p) for w, p in word_passages.items()},
        passages=int(index.passage_alive.sum()),
    )


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
    counts = np.maximum(index.phrase_passage_counts, 1.0)
    out: list[tuple[IntArray, FloatArray]] = []
    for query in queries:
        rows: list[int] = []
        weights: list[float] = []
        names = lookup.link(query)
        for name in keep(query, names) if keep is not None else names:
            weight = lookup.specificity(name)
            for row in lookup.rows[name]:
                rows.append(row)
                weights.append(weight / float(counts[row]))
        out.append((np.array(rows, dtype=np.int64), np.array(weights, dtype=np.float64)))
    return out
