"""Issue 54: a directory memory stores each passage, phrase and fact vector once. The SQLite embedding cache holds a
vector until a snapshot does (so a crash loses no embedding), then drops it; a process that opened an older
snapshot finds the vectors another process saved since in the newest snapshot's parts, and a memory without a
usable snapshot embeds its texts again. Oracles: a memory built with `graph.keep_vector_cache` (the cache keeps
every vector, as before), the counts of texts embedded, and the rows of engram.sqlite read with sqlite3."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.index.live import load
from engram.store import snapshot_parts
from engram.store.packed_rows import unpack
from engram.store.snapshot import load_snapshot
from engram.store.snapshot_lookup import SnapshotLookup, mapped_file
from test_snapshot_parts import Counting, corpus, newest, rankings

KEEP = {"graph": {"keep_vector_cache": True}}
STORED = ("passage", "phrase", "fact")


def cached(path: Path, roles: tuple[str, ...] = STORED) -> int:
    """The vectors of `roles` (passage, phrase and fact ones) in the embedding cache."""
    with sqlite3.connect(path / "engram.sqlite") as db:
        marks = ",".join("?" * len(roles))
        return int(db.execute(f"SELECT count(*) FROM embeddings WHERE role IN ({marks})", roles).fetchone()[0])


def build(path: Path, docs: list[Document], extractions: list[dict[str, Any]], config: Any = None) -> Path:
    with Memory(path, embedder=HashEmbedder(), config=config) as memory:
        memory.index(docs, extractions=extractions)
    return path


@pytest.fixture(params=["linked", "whole"])
def parts(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Snapshots whose saved rows are hard-linked as parts (any size), or written whole (the default below
    16,384 rows): the new rows lie in a new part, or in a new file of every row."""
    if request.param == "linked":
        monkeypatch.setattr(snapshot_parts, "MIN_LINK_ROWS", 0)
    return str(request.param)


def test_each_vector_is_stored_once(tmp_path: Path, parts: str) -> None:
    docs, extractions = corpus(12)
    kept = build(tmp_path / "kept", docs, extractions, KEEP)
    vectors = cached(kept)
    assert vectors > 0
    path = tmp_path / "m"
    for start, stop in ((0, 8), (8, 12)):  # the second close writes only the rows it added, when linked
        build(path, docs[start:stop], extractions[start:stop])
        assert cached(path) == 0
    if parts == "linked":
        assert (newest(path) / "phrase.1.npy").exists()
    snapshot_rows = 0
    for role in STORED:
        names = snapshot_parts.part_names({p.name: "" for p in newest(path).iterdir()}, role)
        snapshot_rows += sum(len(np.load(newest(path) / n, mmap_mode="r", allow_pickle=False)) for n in names)
    assert snapshot_rows == vectors  # every vector is in the snapshot, once
    smaller = (kept / "engram.sqlite").stat().st_size - (path / "engram.sqlite").stat().st_size
    assert smaller >= vectors * 4 * HashEmbedder().dim  # the space went back to the file system
    counting = Counting()
    with Memory(path, embedder=counting) as memory, Memory(kept, embedder=HashEmbedder()) as fresh:
        assert rankings(memory) == rankings(fresh)
    assert counting.texts == 0


CRASH = """
import os, sys
from engram import Memory
from engram.embed import HashEmbedder
from test_snapshot_parts import corpus
docs, extractions = corpus(6)
memory = Memory(sys.argv[1], embedder=HashEmbedder())
memory.index(docs, extractions=extractions)
os._exit(0)  # killed before its close: no snapshot of this generation
"""


def test_a_crash_before_the_close_keeps_every_vector_it_embedded(tmp_path: Path) -> None:
    path = tmp_path / "m"
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent / "src"), str(tests)])}
    subprocess.run([sys.executable, "-c", CRASH, str(path)], check=True, env=env, timeout=120)
    assert cached(path) > 0 and not list((path / "index").glob("g*"))
    counting = Counting()
    with Memory(path, embedder=counting) as memory:
        memory.index([Document("extra", "Person 9 was born in Town 1.", title="Person 9")], extractions=[])
    assert counting.texts == 1  # the new passage alone: the crashed run's vectors came from the cache
    assert cached(path) == 0  # and the close moved them into its snapshot


@pytest.mark.parametrize("role", ["passage", "fact"])
def test_without_a_usable_snapshot_the_texts_are_embedded_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, role: str
) -> None:
    docs, extractions = corpus(8)
    kept = build(tmp_path / "kept", docs, extractions, KEEP)
    rows = cached(kept, (role,))
    path = build(tmp_path / "m", docs, extractions)
    damaged = newest(path) / f"{role}.npy"
    data = bytearray(damaged.read_bytes())
    data[-4:] = b"\x00\x00\xc0\x7f"  # a NaN in the last row
    damaged.write_bytes(bytes(data))
    counting = Counting()
    with (
        caplog.at_level(logging.WARNING, logger="engram"),
        Memory(path, embedder=counting) as memory,
        Memory(kept, embedder=HashEmbedder()) as fresh,
    ):
        assert rankings(memory) == rankings(fresh)
    assert any("not used" in r.getMessage() for r in caplog.records)  # damage is said, never used
    assert counting.texts == rows  # that role's vectors only: the other files match their checksums
    counting = Counting()
    with Memory(path, embedder=counting) as memory, Memory(kept, embedder=HashEmbedder()) as fresh:
        assert rankings(memory) == rankings(fresh)
    assert counting.texts == 0  # the close after the rebuild saved a good snapshot


def test_a_reader_finds_the_vectors_another_process_saved(tmp_path: Path, parts: str) -> None:
    docs, extractions = corpus(12)
    path = build(tmp_path / "m", docs[:6], extractions[:6])
    kept = build(tmp_path / "kept", docs, extractions, KEEP)
    counting = Counting()
    reader = Memory(path, embedder=counting)
    try:
        reader.stats()  # opened from the first snapshot
        with Memory(path, embedder=HashEmbedder()) as writer:
            writer.index(docs[6:], extractions=extractions[6:])
        assert cached(path) == 0  # the writer's close dropped its new vectors from the cache
        with Memory(kept, embedder=HashEmbedder()) as fresh:
            assert rankings(reader) == rankings(fresh)  # the reader replayed the writer's commit
        assert counting.texts == 0  # with the vectors of the writer's snapshot, not embedded again
    finally:
        reader.close()


def test_an_older_memory_drops_its_cached_vectors_at_its_next_save(tmp_path: Path) -> None:
    docs, extractions = corpus(10)
    path = build(tmp_path / "m", docs[:8], extractions[:8], KEEP)  # as an engram before this kept them
    assert cached(path) > 0
    build(path, docs[8:], extractions[8:])
    assert cached(path) == 0
    kept = build(tmp_path / "kept", docs, extractions, KEEP)
    with Memory(path, embedder=HashEmbedder()) as memory, Memory(kept, embedder=HashEmbedder()) as fresh:
        assert rankings(memory) == rankings(fresh)


def test_a_lookup_reads_only_parts_it_does_not_hold_and_only_sound_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    docs, extractions = corpus(6)
    path = build(tmp_path / "m", docs, extractions)
    table, _ = load_snapshot(path)
    keys, parts = table["fact"]
    wanted = [keys[0], keys[-1], "0" * 64]
    lookup = SnapshotLookup(path, HashEmbedder().dim)
    found = lookup.find("fact", wanted)
    assert sorted(found) == sorted(keys[i] for i in (0, -1))  # the unknown key is left out
    assert np.array_equal(found[keys[-1]], unpack(parts[-1][-1]))  # facts are stored packed (test_packed_rows)
    held = {f for p in parts if (f := mapped_file(p)) is not None}
    assert held and SnapshotLookup(path, HashEmbedder().dim).find("fact", wanted, held) == {}
    damaged = newest(path) / "fact.npy"
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0x01
    damaged.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="engram"):
        assert SnapshotLookup(path, HashEmbedder().dim).find("fact", wanted) == {}
    assert any("does not match its checksum" in r.getMessage() for r in caplog.records)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=8), max_size=40), st.integers(1, 200), st.integers(1, 7))
def test_key_batches_read_what_json_reads(seeds: list[bytes], read: int, size: int) -> None:
    """The streamed reader of a key file gives the keys json.loads gives (a JSON keys file, as written before),
    and the digests hashlib gives (a binary one, as written now), in order and in batches of `size`, whatever
    the read size (keys cut across reads)."""
    keys = [hashlib.sha256(s).hexdigest() for s in seeds]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fact-keys.json"
        path.write_text(json.dumps(keys), encoding="utf-8")
        binary = Path(folder) / "fact-keys.1.bin"
        binary.write_bytes(b"".join(hashlib.sha256(s).digest() for s in seeds))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(load, "READ_BYTES", read)
            for batches in (list(load.key_batches(path, size)), list(load.key_batches(binary, size))):
                assert [k for b in batches for k in b] == keys
                assert all(0 < len(b) <= size for b in batches) and all(len(b) == size for b in batches[:-1])
