"""Issue 10, defects 6 and 15: vector snapshots are checksummed and verified on open (damage -> rebuilt from
SQLite, with a warning), pruning never removes a newer generation or another writer's temporary folder, and
snapshot files and folders are fsynced."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

from engram import Memory
from engram.embed import HashEmbedder
from engram.index.saved.state_file import ARRAYS, KEY_TABLES
from engram.index.view.saved_walk import FILES as WALK_FILES
from engram.store.snapshot import ROLES, read_latest_snapshot, snapshot_dir, write_snapshot
from helpers import DOCS

QUERIES = ["Where was Alice Moreau born?", "What is the capital of Norway?", "Who founded Zenith Foods?"]


def build(path: Path) -> list[list[tuple[str, float]]]:
    with Memory(path, embedder=HashEmbedder()) as memory:
        memory.index(DOCS)
        return dense(memory)


def dense(memory: Memory) -> list[list[tuple[str, float]]]:
    return [[(h.id, h.score) for h in r.passages] for r in memory.retrieve(QUERIES, top_k=5, method="dense")]


def only_snapshot(path: Path) -> Path:
    folders = sorted((path / "index").glob("g*"))
    assert len(folders) == 1
    return folders[0]


@pytest.mark.parametrize("damage", ["flip", "empty", "truncate", "keys", "state"])
def test_damaged_snapshot_is_rebuilt_not_used(tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m"
    expected = build(path)
    folder = only_snapshot(path)
    target = folder / "passage.npy"
    data = bytearray(target.read_bytes())
    if damage == "flip":
        data[200:220] = b"\x7f" * 20  # huge floats in one passage's row
        target.write_bytes(bytes(data))
    elif damage == "empty":
        target.write_bytes(b"")
    elif damage == "truncate":
        target.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "keys":  # read only when the saved state is not usable: here it is gone
        (folder / "passage-keys.bin").write_bytes(b"")  # no keys for its rows
        (folder / "state.json").unlink()
    else:
        refs = folder / "state-phrase_refs.npy"
        refs.write_bytes(refs.read_bytes()[:-8] + np.int64(7).tobytes())
    with caplog.at_level(logging.WARNING, logger="engram"), Memory(path, embedder=HashEmbedder()) as memory:
        assert dense(memory) == expected
    assert any("snapshot" in r.getMessage() and "rebuil" in r.getMessage() for r in caplog.records)
    # closing wrote a good snapshot again: the next open uses it without a warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="engram"), Memory(path, embedder=HashEmbedder()) as memory:
        assert dense(memory) == expected
    assert not caplog.records
    assert read_latest_snapshot(path)


def test_snapshot_has_checksums(tmp_path: Path) -> None:
    build(tmp_path / "m")
    folder = only_snapshot(tmp_path / "m")
    assert (folder / "manifest.json").exists()
    vectors = {"manifest.json", *(f"{r}.npy" for r in ROLES), *(f"{r}-keys.bin" for r in ROLES)}
    state = {"state.json", *(f"state-{a}.npy" for a in [*ARRAYS, *KEY_TABLES])}
    assert {p.name for p in folder.iterdir()} == vectors | state | set(WALK_FILES)  # the last view's walk too


def table(rows: int) -> dict[str, tuple[list[str], np.ndarray]]:
    matrix = np.ones((rows, 4), dtype=np.float32)
    keys = {role: [hashlib.sha256(f"{role}{i}".encode()).hexdigest() for i in range(rows)] for role in ROLES}
    return {role: (keys[role], matrix) for role in ROLES}  # keys are SHA-256 hex digests, as a memory's are


def test_pruning_keeps_newer_generations_and_foreign_temp_folders(tmp_path: Path) -> None:
    write_snapshot(tmp_path, 5, table(2))  # another process already wrote a newer generation
    foreign = tmp_path / "index" / ".g4.other-writer"
    foreign.mkdir()  # another writer's snapshot in progress
    stale = tmp_path / "index" / ".g2.crashed"
    stale.mkdir()
    old = time.time() - 3 * 24 * 3600
    os.utime(stale, (old, old))  # left by a crash days ago
    write_snapshot(tmp_path, 1, table(1))
    write_snapshot(tmp_path, 3, table(3))
    names = {p.name for p in (tmp_path / "index").iterdir()}
    assert names == {"g3", "g5", ".g4.other-writer"}
    assert read_latest_snapshot(tmp_path)["passage"][0] == table(2)["passage"][0]  # g5 is the newest


def test_snapshot_files_and_folders_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    write_snapshot(tmp_path, 1, table(2))
    final = snapshot_dir(tmp_path, 1)
    for name in ("passage.npy", "phrase.npy", "fact.npy", "passage-keys.bin", "fact-keys.bin", "manifest.json"):
        assert any(s.endswith(name) for s in synced), name
    temps = [s for s in synced if Path(s).parent == final.parent and Path(s).name.startswith(".g1.")]
    assert temps  # the folder's entries, before it is renamed into place
    assert str(final.parent) in synced  # the rename itself


def test_vector_files_carry_crc32_and_the_others_sha256(tmp_path: Path) -> None:
    """Every open checks the vector matrices (gigabytes in a large memory): CRC-32 there, SHA-256 elsewhere,
    each as the standard libraries compute it over the file's bytes."""
    import hashlib
    import json
    import zlib

    build(tmp_path / "m")
    folder = only_snapshot(tmp_path / "m")
    sums = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["files"]
    for name, value in sums.items():
        data = (folder / name).read_bytes()
        if name in ("passage.npy", "phrase.npy", "fact.npy"):
            assert value == f"crc32:{zlib.crc32(data):08x}"
        else:
            assert value == hashlib.sha256(data).hexdigest()


def test_a_snapshot_with_sha256_for_its_vectors_still_opens(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Snapshots written before the vector files had CRC-32 list SHA-256 for them: each file is checked in the
    form its manifest gives, so they open without a rebuild, and damage to them is still found."""
    import hashlib
    import json

    from engram.index.live.live_index import LiveIndex

    path = tmp_path / "m"
    expected = build(path)
    folder = only_snapshot(path)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    for role in ("passage", "phrase", "fact"):
        manifest["files"][f"{role}.npy"] = hashlib.sha256((folder / f"{role}.npy").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    loads = []
    original = LiveIndex._load_state

    def spy(self: LiveIndex, generation: int) -> object:
        out = original(self, generation)
        loads.append(out[2] is not None)  # restored from the saved state
        return out

    with caplog.at_level(logging.WARNING, logger="engram"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(LiveIndex, "_load_state", spy)
        with Memory(path, embedder=HashEmbedder()) as memory:
            assert dense(memory) == expected
    assert loads == [True] and not caplog.records


def test_file_checksum_reads_in_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files longer than a window are hashed window after window, to the same values as one pass."""
    import hashlib
    import mmap
    import zlib

    from engram.store import snapshot

    monkeypatch.setattr(snapshot, "HASH_WINDOW", 2 * mmap.ALLOCATIONGRANULARITY)
    for size in (0, 1, 2 * mmap.ALLOCATIONGRANULARITY, 5 * mmap.ALLOCATIONGRANULARITY + 123):
        data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
        target = tmp_path / f"f{size}"
        target.write_bytes(data)
        assert snapshot.file_checksum(target) == hashlib.sha256(data).hexdigest()
        assert snapshot.file_checksum(target, "crc32:0") == f"crc32:{zlib.crc32(data):08x}"
