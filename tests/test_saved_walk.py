"""engram.index.view.saved_walk: the last view's edge arrays saved at close and taken back at open, so the first view
after an open starts from them; a damaged or unfitting file is never used (the view is built, to the same bits)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.index.state.index_state import IndexState
from engram.index.view.saved_walk import FILES, restore_walk
from helpers import DOCS, EXTRACTIONS
from rooms import Rooms
from test_continual import CONFIG
from test_view_patch import built, identical

QUERIES = ["Who founded Acme Tools?", "Where was Alice Moreau born?", "What is the capital of Norway?"]
MORE = Document("mill", "Anna Berg founded the North Mill near Oslo.", title="North Mill")
MORE_EXTRACTION = {"id": "mill", "entities": ["Anna Berg", "North Mill", "Oslo"],
                   "triples": [["Anna Berg", "founded", "North Mill"], ["North Mill", "is near", "Oslo"]]}  # fmt: skip


def memory_at(path: Path) -> Memory:
    return Memory(path, embedder=HashEmbedder(dim=64), config=CONFIG)


def rooms_at(path: Path) -> Rooms:
    """The memory at `path` opened without the facade, to look at its live state (its saved walk)."""
    return Rooms(path, HashEmbedder(dim=64), CONFIG)


def closed_after_a_query(path: Path) -> list[list[tuple[str, float]]]:
    with memory_at(path) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        return ranked(memory)


def ranked(memory: Memory | Rooms) -> list[list[tuple[str, float]]]:
    return [[(p.id, p.score) for p in r.passages] for r in memory.retrieve(QUERIES, 4)]


def snapshot(path: Path) -> Path:
    (folder,) = sorted((path / "index").glob("g*"))
    return folder


def test_the_first_view_after_an_open_is_the_saved_one_and_patches_on(tmp_path: Path) -> None:
    before = closed_after_a_query(tmp_path / "m")
    assert all((snapshot(tmp_path / "m") / name).exists() for name in FILES)
    with rooms_at(tmp_path / "m") as memory:
        state = memory.live.load()
        assert (
            state.caches.patch_base is not None and state.caches.base_check is not None
        )  # mapped, checked on a thread
        first = memory.live.current()
        assert first.patched and state.caches.base_check is None  # taken as saved, not built
        assert not first.walk.matrix.data.flags.writeable  # the saved file's read-only map, not a copy
        identical(first, built(state))
        assert ranked(memory) == before
        memory.index([MORE], extractions=[MORE_EXTRACTION])
        patched = memory.live.current()
        assert patched.patched
        identical(patched, built(memory.live.load()))
        after = ranked(memory)
    for name in FILES:  # the same memory opened without a saved walk: the same answers
        (snapshot(tmp_path / "m") / name).unlink(missing_ok=True)
    with rooms_at(tmp_path / "m") as memory:
        assert memory.live.load().caches.patch_base is None
        assert ranked(memory) == after


def test_a_damaged_walk_file_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    before = closed_after_a_query(tmp_path / "m")
    damaged = snapshot(tmp_path / "m") / "walk-walk.npy"
    data = bytearray(damaged.read_bytes())
    data[-3] ^= 0xFF  # a walk value, past the header
    damaged.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING), rooms_at(tmp_path / "m") as memory:
        first = memory.live.current()
        assert not first.patched  # built from the edges
        identical(first, built(memory.live.load()))
        assert ranked(memory) == before
    assert "walk-walk.npy does not match its checksum" in caplog.text


def test_changes_no_view_has_seen_are_saved_with_their_graph(tmp_path: Path) -> None:
    with memory_at(tmp_path / "m") as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        ranked(memory)
        memory.index([MORE], extractions=[MORE_EXTRACTION])  # committed, never read: the close derives the graph
    assert all((snapshot(tmp_path / "m") / name).exists() for name in FILES)
    with rooms_at(tmp_path / "m") as memory:
        first = memory.live.current()
        assert first.patched and not first.walk.matrix.data.flags.writeable
        identical(first, built(memory.live.load()))
        assert {"mill"} <= {p.id for r in memory.retrieve(["Who founded the North Mill?"], 5) for p in r.passages}


def test_a_memory_built_and_closed_without_a_view_saves_no_graph(tmp_path: Path) -> None:
    """The save patches a view's graph but never builds one from every edge (the build's peak memory)."""
    with memory_at(tmp_path / "m") as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
    assert not any((snapshot(tmp_path / "m") / name).exists() for name in FILES)
    with rooms_at(tmp_path / "m") as memory:
        assert memory.live.load().caches.patch_base is None
        first = memory.live.current()
        assert not first.patched
        identical(first, built(memory.live.load()))


def test_saved_arrays_that_do_not_fit_the_state_are_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    closed_after_a_query(tmp_path / "m")
    folder = snapshot(tmp_path / "m")
    sums = {name: "unchecked" for name in FILES}
    state = IndexState(64, CONFIG.graph)  # an empty state: no phrase or passage rows
    with caplog.at_level(logging.WARNING):
        restore_walk(state, folder, sums, {"n_phrases": 0, "nodes": 3})
    assert state.caches.patch_base is None and state.caches.base_check is None
    assert "saved walk" in caplog.text and "do not fit" in caplog.text
