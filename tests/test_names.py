"""The query-linking names kept by the index (engram.index.state.phrase_names) equal a lookup rebuilt from each view."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.index.state.phrase_names import fold
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.links import lookup_for
from engram.text import normalize_phrase

DOCS = {
    "a": [("José Martí", "born in", "Havana"), ("Havana", "capital of", "Cuba")],
    "b": [("Aschenbrödel", "written by", "Bernd Müller"), ("jose marti", "wrote", "Ismaelillo")],
    "c": [("Cuba", "island in", "Caribbean Sea"), ("東京", "capital of", "Japan")],
    "d": [("Bernd Müller", "born in", "Havana"), ("the old mill town", "near", "Cuba")],
}


def rebuilt(view: GraphIndex) -> tuple[dict[str, tuple[int, ...]], dict[str, int], int]:
    """What the lookup was before it was kept incrementally: a pass over every phrase and context edge."""
    rows: dict[str, list[int]] = {}
    words_of: list[list[str]] = []
    for row, phrase in enumerate(view.tables.phrases):
        name = fold(phrase) if view.phrase_alive[row] else ""
        words_of.append(name.split())
        if name:
            rows.setdefault(name, []).append(row)
    passages: dict[str, set[int]] = {}
    for passage, phrase in view.tables.context.tolist():
        for word in words_of[phrase]:
            passages.setdefault(word, set()).add(passage)
    longest = max((len(n.split()) for n in rows), default=0)
    return {k: tuple(v) for k, v in rows.items()}, {w: len(p) for w, p in passages.items()}, longest


def check(memory: Memory) -> None:
    view = memory.context().view
    lookup = lookup_for(view)
    rows, words, longest = rebuilt(view)
    for name, expected in rows.items():
        assert name in lookup.rows and lookup.rows[name] == expected, name
    dead = [fold(p) for i, p in enumerate(view.tables.phrases) if not view.phrase_alive[i]]
    assert not any(name in lookup.rows for name in dead if name not in rows)
    for name in [*rows, *dead, "no such phrase"]:  # the scan's membership test agrees with the rows it stands for
        assert lookup.names.has(name, view.phrase_alive) == bool(lookup.names.rows(name, view.phrase_alive)), name
    for word in set(lookup.names.table.word_ids) | set(words):
        assert lookup.names.passages_with(word) == words.get(word, 0), word
    assert lookup.longest >= longest and lookup.passages == int(view.passage_alive.sum())
    starts: dict[str, int] = {}  # every row's name so far, alive or not: what the scan may skip by
    for words_of in (fold(p).split() for p in view.tables.phrases):
        if words_of:
            starts[words_of[0]] = max(starts.get(words_of[0], 0), len(words_of))
    for word in lookup.names.table.word_ids:
        assert lookup.names.longest_from(word) == starts.get(word, 0), word
    assert lookup.names.longest_from("no-such-word") == 0
    queries = ["Did José Marti live in Havana, Cuba, or did Bernd Müller?", " ".join([*dead, *rows, "mill town"])]
    for query in queries:
        assert lookup.link(query) == list(dict.fromkeys(greedy(fold(query).split(), rows, longest)))  # each once


def greedy(words: list[str], rows: dict[str, tuple[int, ...]], longest: int) -> list[str]:
    found: list[str] = []
    i = 0
    while i < len(words):
        size = next((s for s in range(min(longest, len(words) - i), 0, -1) if " ".join(words[i : i + s]) in rows), 0)
        if size:
            found.append(" ".join(words[i : i + size]))
        i += max(size, 1)
    return found


def index(memory: Memory, ids: list[str], version: int = 0) -> None:
    docs = [Document(i, f"{DOCS[i]} v{version}") for i in ids]
    extractions: list[dict[str, Any]] = [{"id": i, "entities": [], "triples": [list(t) for t in DOCS[i]]} for i in ids]
    memory.index(docs, extractions=extractions)


def test_names_follow_inserts_deletes_updates_and_reopening(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32)) as memory:
        index(memory, ["a", "b"])
        check(memory)
        index(memory, ["c"])
        check(memory)
        memory.delete(["a"])
        check(memory)
        memory.update(Document("b", "changed text"), extractions=[{"id": "b", "entities": [], "triples": []}])
        check(memory)
        index(memory, ["a", "d"], version=1)
        check(memory)
        old = memory.context().view
        memory.delete(["d", "c"])
        check(memory)
        assert lookup_for(old).names.passages_with("mill") == 1  # an older view keeps its own counts
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32)) as reopened:
        check(reopened)


def test_fold_takes_no_shortcut_that_changes_a_name() -> None:
    """`fold` returns an ASCII normal form as it is; oracle: the whole NFKD, marks dropped, NFC path on every text,
    ASCII or not (accents, width forms, ligatures, other scripts, punctuation)."""
    texts = ["West  Chicago, High School!", "Aschenbrödel", "José Martí", "Ｆｕｌｌ ﬁ", "東京", "Москва", "", "1901"]
    texts.append("e\u0301")  # a combining accent after an ASCII letter
    for text in texts:
        decomposed = unicodedata.normalize("NFKD", normalize_phrase(text))
        expected = unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))
        assert fold(text) == expected
    assert fold("Aschenbrödel") == fold("Aschenbrodel") == "aschenbrodel"
