"""The saved phrase ANN index is checked against its checksums on a thread while a change builds its tables
(engram.index.saved.ann_cache.start_check), and what that check found is what loading it believes: damage still keeps
the index out, a file replaced after the check began is checked again, and a change that does not search leaves
the loader as it was."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram import Memory
from engram.embed import HashEmbedder
from engram.graph import ann

if not ann.available():
    pytest.skip("the ann extra (faiss-cpu) is not installed", allow_module_level=True)

import engram.index.saved.ann_cache as ann_cache
from engram.store.snapshot import verify_files
from rooms import Rooms
from test_ann import ann_memory


def counting(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record every check `ann_cache` makes on the caller's thread (and still make it)."""
    calls: list[list[str]] = []

    def spy(folder: Path, sums: dict[str, str], names: list[str]) -> None:
        calls.append(list(names))
        verify_files(folder, sums, names)

    monkeypatch.setattr(ann_cache, "verify_files", spy)
    return calls


def grown_and_fresh(tmp_path: Path, seed: int, before: Callable[[Path], None]) -> tuple[Any, Any, Any]:
    """A memory with a saved index, `before` applied to its folder, then reopened and grown by a change that
    searches for synonyms; with the canonical graph of a memory built from scratch with the same documents."""
    docs, extractions, config = ann_memory(tmp_path / "m", seed=seed)
    before(tmp_path / "m" / "index" / "ann")
    with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
        memory.index(docs[200:], extractions=extractions[200:])
        loaded = memory.live.load().synonyms.ann
        grown = memory.graph()
    with Memory(tmp_path / "fresh", embedder=HashEmbedder(dim=64), config=config) as fresh:
        fresh.index(docs, extractions=extractions)
        return loaded, grown, fresh.graph()


def test_a_change_loads_the_index_its_thread_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch)
    loaded, grown, fresh = grown_and_fresh(tmp_path, 11, lambda folder: None)
    assert loaded is not None and loaded.base_entries > 0  # the saved graph, mapped
    assert calls == []  # nothing checked again on the change's own thread
    assert grown == fresh


def test_damage_found_by_the_check_keeps_the_index_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def damage(folder: Path) -> None:
        with (folder / "phrase-links.faiss").open("r+b") as handle:
            handle.seek(os.path.getsize(folder / "phrase-links.faiss") // 2)
            byte = handle.read(1)
            handle.seek(-1, os.SEEK_CUR)
            handle.write(bytes([byte[0] ^ 0xFF]))

    calls = counting(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="engram.index.saved.ann_cache"):
        loaded, grown, fresh = grown_and_fresh(tmp_path, 12, damage)
    assert any("phrase-links.faiss does not match its checksum" in r.getMessage() for r in caplog.records)
    assert calls == []  # the thread's finding was used
    assert loaded is None or loaded.base_entries == 0  # built again, not the damaged graph
    assert grown == fresh


def test_a_file_replaced_after_the_check_began_is_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def replace(folder: Path) -> None:
        shutil.copy(folder / "phrase-rows.npy", folder / "copy.npy")
        os.replace(folder / "copy.npy", folder / "phrase-rows.npy")  # same bytes, another file

    config = ann_memory(tmp_path / "m", seed=13)[2]
    folder = tmp_path / "m" / "index" / "ann"
    calls = counting(monkeypatch)
    for change, expected in ((lambda: None, 0), (lambda: replace(folder), 1)):
        with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
            state = memory.live.load()
            check = ann_cache.start_check(tmp_path / "m")
            assert check is not None and check.error() == ""
            change()
            assert ann_cache.load_ann(tmp_path / "m", state, state.caches.saved_as, check)
            assert len(calls) == expected


def test_a_change_without_a_search_leaves_the_plain_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, _, config = ann_memory(tmp_path / "m", seed=14)
    calls = counting(monkeypatch)
    with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
        memory.delete([docs[0].id])
        state = memory.live.load()
        assert state.synonyms.ann is None and state.synonyms.ann_loader is not None
        state.synonyms.ann_loader()  # the next search: checks the files itself, the change's check is gone
        assert state.synonyms.ann is not None and len(calls) == 1


def test_a_stopped_check_is_never_read_as_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import engram.store.snapshot as snapshot

    started = threading.Event()

    def slow(path: Path, like: str = "", stop: threading.Event | None = None) -> str:
        started.set()
        assert stop is not None and stop.wait(30)
        return ""  # what file_checksum returns when stopped before the end

    (tmp_path / "a.bin").write_bytes(b"x")
    monkeypatch.setattr(snapshot, "file_checksum", slow)
    check = snapshot.PendingCheck(tmp_path, {"a.bin": "crc32:00000000"}, ["a.bin"])
    assert started.wait(30)
    check.cancel()
    assert check.error() != "" and not check.passed()
