"""Issue 11: a close after a few changes writes only the vector rows added since (engram.store.snapshot_parts):
the saved parts are hard-linked into the new snapshot, the new rows written as one more part. Oracles: a memory
built from scratch with the same documents in one go (its vectors and rankings), and the files' inodes."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.embed.base import Progress, Role, Vectors
from engram.store import snapshot_parts
from engram.store.snapshot import read_latest_snapshot, snapshot_dir
from engram.store.snapshot_parts import read_keys

QUERIES = ["Where was person 3 born?", "Who founded company 7?", "Which town is near river 2?"]
ROLES = ("passage", "phrase", "fact")


def corpus(n: int) -> tuple[list[Document], list[dict[str, Any]]]:
    docs, extractions = [], []
    for i in range(n):
        person, town, firm = f"Person {i}", f"Town {i % 5}", f"Company {i}"
        text = f"{person} was born in {town}. {person} founded {firm} near river {i % 3}."
        docs.append(Document(f"d{i}", text, title=person))
        triples = [[person, "born in", town], [firm, "founded by", person], [town, "near", f"River {i % 3}"]]
        extractions.append({"id": f"d{i}", "entities": [person, town, firm], "triples": triples})
    return docs, extractions


def rankings(memory: Memory) -> list[list[tuple[str, float]]]:
    out = []
    for method in ("dense", "hipporag2"):
        for result in memory.retrieve(QUERIES, top_k=5, method=method):
            out.append([(h.id, round(h.score, 12)) for h in result.passages])
    return out


def newest(path: Path) -> Path:
    folders = [p for p in (path / "index").glob("g*") if p.name[1:].isdigit()]
    return max(folders, key=lambda p: int(p.name[1:]))


def vectors_by_key(path: Path) -> dict[str, dict[str, bytes]]:
    table = read_latest_snapshot(path)
    out: dict[str, dict[str, bytes]] = {}
    for role in ROLES:
        keys, parts = table[role]
        rows = np.concatenate(parts)
        out[role] = {k: bytes(memoryview(r)) for k, r in zip(keys, rows)}
    return out


class Counting(HashEmbedder):
    """Counts the texts it embeds other than queries."""

    texts = 0

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        if role != "query":
            self.texts += len(texts)
        return super().embed(texts, role=role, progress=progress)


def session(path: Path, docs: list[Document], extractions: list[dict[str, Any]], start: int, stop: int = 0) -> None:
    """Open the memory, index documents `start` to `stop` (to the end when 0) with their extractions, close."""
    with Memory(path, embedder=HashEmbedder()) as memory:
        memory.index(docs[start : stop or None], extractions=extractions[start : stop or None])


def scratch(tmp_path: Path, docs: list[Document], extractions: list[dict[str, Any]]) -> Path:
    path = tmp_path / "scratch"
    with Memory(path, embedder=HashEmbedder()) as memory:
        memory.index(docs, extractions=extractions)
    return path


def matches_scratch(tmp_path: Path, path: Path, docs: list[Document], extractions: list[dict[str, Any]]) -> None:
    """The memory at `path` holds the vectors (by key) and gives the rankings of one built from scratch."""
    whole = scratch(tmp_path, docs, extractions)
    assert vectors_by_key(path) == vectors_by_key(whole)
    with Memory(path, embedder=HashEmbedder()) as memory, Memory(whole, embedder=HashEmbedder()) as fresh:
        assert rankings(memory) == rankings(fresh)


@pytest.fixture
def link_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_parts, "MIN_LINK_ROWS", 0)  # link parts of any size (the default: 16,384 rows)


def test_close_links_saved_rows_and_writes_the_new_ones(
    tmp_path: Path, link_all: None, caplog: pytest.LogCaptureFixture
) -> None:
    docs, extractions = corpus(12)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 8)
    first = newest(path)
    inodes = {role: os.stat(first / f"{role}.npy").st_ino for role in ROLES}
    key_inodes = {role: os.stat(first / f"{role}-keys.bin").st_ino for role in ROLES}
    rows = {role: len(read_latest_snapshot(path)[role][0]) for role in ROLES}
    session(path, docs, extractions, 8)
    second = newest(path)
    assert second != first and not first.exists()
    table = read_latest_snapshot(path)
    for role in ROLES:
        assert os.stat(second / f"{role}.npy").st_ino == inodes[role]  # linked, not written again
        added = len(table[role][0]) - rows[role]
        assert added > 0 and not (second / f"{role}.2.npy").exists()
        dim = HashEmbedder().dim  # passage vectors float32, phrase float16, fact packed int8 (docs/format.md)
        row = {"passage": 2 * dim, "phrase": 2 * dim, "fact": dim + 4}[role]
        assert os.path.getsize(second / f"{role}.1.npy") == 128 + added * row  # new rows only
        assert os.stat(second / f"{role}-keys.bin").st_ino == key_inodes[role]
        assert os.path.getsize(second / f"{role}-keys.1.bin") == 32 * added  # a SHA-256 digest per new row
    whole = scratch(tmp_path, docs, extractions)
    assert vectors_by_key(path) == vectors_by_key(whole)
    with (
        caplog.at_level(logging.WARNING, logger="engram"),
        Memory(path, embedder=HashEmbedder()) as memory,
        Memory(whole, embedder=HashEmbedder()) as fresh,
    ):
        assert rankings(memory) == rankings(fresh)
    assert not caplog.records  # the saved state was used, parts and all (a rebuild from the records logs why)


def test_a_running_process_links_its_own_last_snapshot(tmp_path: Path, link_all: None) -> None:
    docs, extractions = corpus(9)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 5)
    with Memory(path, embedder=HashEmbedder()) as memory:
        memory.index(docs[5:7], extractions=extractions[5:7])
        memory.flush()
        flushed = newest(path)
        inodes = {name: os.stat(flushed / name).st_ino for name in ("fact.npy", "fact.1.npy")}
        memory.index(docs[7:], extractions=extractions[7:])
    last = newest(path)
    assert last != flushed
    assert os.stat(last / "fact.npy").st_ino == inodes["fact.npy"]
    assert os.stat(last / "fact.1.npy").st_ino != inodes["fact.1.npy"]  # the rows since open, written with the new
    assert not (last / "fact.2.npy").exists()
    whole = scratch(tmp_path, docs, extractions)
    with Memory(path, embedder=HashEmbedder()) as memory, Memory(whole, embedder=HashEmbedder()) as fresh:
        assert rankings(memory) == rankings(fresh)


def test_parts_stay_few_over_many_closes(tmp_path: Path, link_all: None) -> None:
    docs, extractions = corpus(14)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 2)
    for i in range(2, 14):
        session(path, docs, extractions, i, i + 1)
        parts = sorted(p.name for p in newest(path).glob("passage*.npy"))
        assert 2 <= len(parts) <= snapshot_parts.MAX_PARTS
    matches_scratch(tmp_path, path, docs, extractions)


@pytest.mark.parametrize("part", ["passage.npy", "passage.1.npy"])
def test_a_damaged_part_is_not_used(
    tmp_path: Path, link_all: None, part: str, caplog: pytest.LogCaptureFixture
) -> None:
    docs, extractions = corpus(10)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 6)
    session(path, docs, extractions, 6)
    target = newest(path) / part
    data = bytearray(target.read_bytes())
    data[-40:-20] = b"\x7f" * 20  # huge floats in the last row of the part
    target.write_bytes(bytes(data))
    whole = scratch(tmp_path, docs, extractions)
    with (
        caplog.at_level(logging.WARNING, logger="engram"),
        Memory(path, embedder=HashEmbedder()) as memory,
        Memory(whole, embedder=HashEmbedder()) as fresh,
    ):
        assert rankings(memory) == rankings(fresh)
    assert any("does not match its checksum" in r.getMessage() for r in caplog.records)


def test_without_hard_links_every_row_is_written(
    tmp_path: Path, link_all: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, extractions = corpus(8)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 5)

    def refuse(*_: object) -> None:
        raise OSError("hard links not supported")

    monkeypatch.setattr(os, "link", refuse)
    session(path, docs, extractions, 5)
    assert sorted(p.name for p in newest(path).glob("*.npy") if not p.name.startswith(("state", "walk"))) == [
        "fact.npy",
        "passage.npy",
        "phrase.npy",
    ]
    whole = scratch(tmp_path, docs, extractions)
    assert vectors_by_key(path) == vectors_by_key(whole)


def test_small_tables_stay_one_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    docs, extractions = corpus(6)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 3)
    with caplog.at_level(logging.WARNING, logger="engram"), Memory(path, embedder=HashEmbedder()) as memory:
        memory.index(docs[3:], extractions=extractions[3:])
    folder = newest(path)
    assert folder == snapshot_dir(path, int(folder.name[1:]))
    assert not list(folder.glob("*.1.npy"))
    assert all(os.stat(folder / f"{role}.npy").st_nlink == 1 for role in ROLES)
    assert not caplog.records  # no warning: in particular none about a phrase ANN index that was never saved


def test_a_snapshot_written_before_parts_still_opens(tmp_path: Path, link_all: None) -> None:
    docs, extractions = corpus(8)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 5)
    folder = newest(path)
    expected = vectors_by_key(path)
    every = {role: read_keys(folder / f"{role}-keys.bin") for role in ROLES}
    for role in ROLES:  # the layout before parts: one keys.json for every role
        (folder / f"{role}-keys.bin").unlink()
    (folder / "keys.json").write_text(json.dumps(every), encoding="utf-8")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    files = {k: v for k, v in manifest["files"].items() if not k.endswith("-keys.bin")}
    files["keys.json"] = hashlib.sha256((folder / "keys.json").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps({"files": files}), encoding="utf-8")
    assert vectors_by_key(path) == expected  # read through keys.json
    session(path, docs, extractions, 5)
    last = newest(path)
    assert not (last / "keys.json").exists() and not list(last.glob("*.1.npy"))  # written whole, in parts' layout
    matches_scratch(tmp_path, path, docs, extractions)


def test_parts_serve_a_rebuild_from_the_records(tmp_path: Path, link_all: None) -> None:
    docs, extractions = corpus(10)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 6)
    session(path, docs, extractions, 6)
    folder = newest(path)
    assert (folder / "fact.1.npy").exists()
    (folder / "state.json").unlink()  # the saved state is gone: the vectors are looked up by key in the parts
    store = sqlite3.connect(path / "engram.sqlite")
    with store:
        store.execute("DELETE FROM embeddings")  # and nowhere else
    store.close()
    whole = scratch(tmp_path, docs, extractions)
    counting = Counting()
    with Memory(path, embedder=counting) as memory, Memory(whole, embedder=HashEmbedder()) as fresh:
        assert rankings(memory) == rankings(fresh)
    assert counting.texts == 0  # every passage, phrase and fact vector came from the parts (queries aside)


def test_parts_whose_keys_were_written_as_json_are_read_and_linked_as_they_are(
    tmp_path: Path, link_all: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot written before binary keys holds `{role}-keys.json` (a JSON list of hex digests): it opens as
    it is (its saved state used, nothing rebuilt), and the next close links that file unchanged beside the new
    part's binary keys. Oracle: a memory built from scratch (vectors by key, rankings)."""
    docs, extractions = corpus(12)
    path = tmp_path / "m"
    session(path, docs, extractions, 0, 8)
    folder = newest(path)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    for role in ROLES:  # as an engram before binary keys wrote them
        keys = read_keys(folder / f"{role}-keys.bin")
        (folder / f"{role}-keys.bin").unlink()
        (folder / f"{role}-keys.json").write_text(json.dumps(keys), encoding="utf-8")
        del manifest["files"][f"{role}-keys.bin"]
        manifest["files"][f"{role}-keys.json"] = hashlib.sha256((folder / f"{role}-keys.json").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    inodes = {role: os.stat(folder / f"{role}-keys.json").st_ino for role in ROLES}
    with caplog.at_level(logging.WARNING, logger="engram"):
        session(path, docs, extractions, 8)
    assert not caplog.records  # the saved state and its vectors were used as they are
    last = newest(path)
    for role in ROLES:
        assert os.stat(last / f"{role}-keys.json").st_ino == inodes[role]  # linked, still JSON
        assert (last / f"{role}-keys.1.bin").exists() and not (last / f"{role}-keys.bin").exists()
    matches_scratch(tmp_path, path, docs, extractions)
