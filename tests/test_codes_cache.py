"""Fact codes saved beside the snapshot (engram.index.saved.codes_cache): a reopened memory maps them instead of
encoding every fact again, rows added after them are scored exactly, damaged or foreign codes are never used, and
retrieval gives what a full scan of the float32 facts gives (a memory with `fact_codes="off"`) throughout."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from engram import Document, GraphConfig, MemoryConfig
from engram.embed import HashEmbedder
from engram.index.state import coded_rows as coded
from engram.index.state.coded_rows import CodedRows
from rooms import Rooms

if not coded.available():
    pytest.skip("the ann extra (simsimd) is not installed", allow_module_level=True)

WORDS = ["river", "mill", "town", "bank", "north", "old", "lake", "berg", "anna", "oster", "1901", "1910", "ferry"]
NEW = ["quarry", "harbour", "mint", "1950"]  # words only later changes use: their facts are the best for a query
QUERIES = ["who owned the old mill", "north river bank", "anna berg 1901", "ferry 1910", "quarry harbour mint 1950"]


def corpus(
    first: int, count: int, seed: int, words: list[str] = WORDS
) -> tuple[list[Document], list[dict[str, object]]]:
    rng = np.random.default_rng(seed)

    def phrase() -> str:
        return " ".join(rng.choice(words, int(rng.integers(1, 4))))

    docs, extractions = [], []
    for i in range(first, first + count):
        triples = [[phrase(), str(rng.choice(["is near", "founded", "owned by"])), phrase()] for _ in range(3)]
        docs.append(Document(f"d{i}", ". ".join(" ".join(t) for t in triples) + "."))
        extractions.append({"id": f"d{i}", "triples": triples})
    return docs, extractions


def opened(path: Path, setting: str) -> Rooms:
    """The memory at `path` opened without the facade, to look at its live state (its fact codes)."""
    # float16 facts: a memory of packed 8-bit facts (the default) is its own codes and saves none (test_coded)
    config = MemoryConfig(graph=GraphConfig(ann="off", fact_codes=setting, vector_precision="float16"))
    return Rooms(path, HashEmbedder(dim=64), config)


def results(memory: Rooms) -> list[object]:
    found = memory.retrieve(QUERIES, top_k=10)
    return [([(p.id, p.score) for p in r.passages], r.method, r.facts, r.seeds) for r in found]


def codes_of(memory: Rooms) -> CodedRows:
    codes = memory.live.current().fact_codes
    assert codes is not None
    return codes


def manifest(path: Path) -> dict[str, object]:
    loaded = json.loads((path / "index" / "codes" / "manifest.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def state_token(path: Path) -> str:
    """The checksum of the newest saved state's state.json, as the snapshot's manifest lists it."""
    newest = max((path / "index").glob("g*"), key=lambda p: int(p.name[1:]))
    token = json.loads((newest / "manifest.json").read_text())["files"]["state.json"]
    assert isinstance(token, str)
    return token


def change(memory: Rooms, first: int, count: int, seed: int) -> None:
    docs, extractions = corpus(first, count, seed, NEW if first >= 150 else WORDS)
    memory.index(docs, extractions=extractions)


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """The same memory twice: facts scored through codes, and by a full scan (the oracle)."""
    paths = tmp_path / "on", tmp_path / "off"
    for path, setting in zip(paths, ("on", "off")):
        with opened(path, setting) as memory:
            change(memory, 0, 150, seed=1)
            memory.delete([f"d{i}" for i in range(0, 150, 9)])
    return paths


def test_a_reopened_memory_maps_its_saved_codes(pair: tuple[Path, Path]) -> None:
    on, off = pair
    saved = manifest(on)
    assert saved["state"] == state_token(on) and not (off / "index" / "codes").exists()
    with opened(on, "on") as memory, opened(off, "off") as oracle:
        assert results(memory) == results(oracle)
        codes = codes_of(memory)
        assert codes.mapped and codes.encoded == saved["rows"] == len(memory.live.state.facts)  # type: ignore[union-attr]


def test_rows_added_after_the_saved_codes_are_scored_exactly_then_encoded(pair: tuple[Path, Path]) -> None:
    on, off = pair
    rows = manifest(on)["rows"]
    with opened(on, "on") as memory, opened(off, "off") as oracle:
        for m in (memory, oracle):
            change(m, 150, 5, seed=2)
        assert results(memory) == results(oracle)
        codes = codes_of(memory)
        assert codes.mapped and codes.encoded == rows < len(memory.live.state.facts)  # type: ignore[union-attr]
    saved = manifest(on)  # the file kept, its state renamed to the new saved state
    assert saved["rows"] == rows and saved["state"] == state_token(on)
    with opened(on, "on") as memory, opened(off, "off") as oracle:
        assert results(memory) == results(oracle)
        codes = codes_of(memory)
        assert codes.mapped
        codes.tail_rows = 3  # more rows past the saved codes than this: the codes are copied to RAM and grow
        for m in (memory, oracle):
            change(m, 155, 5, seed=3)
        assert results(memory) == results(oracle)
        assert not codes.mapped and codes.encoded == len(memory.live.state.facts)  # type: ignore[union-attr]
        memory.flush()  # written again, all rows
        facts, written = codes.encoded, (on / "index" / "codes" / "fact.codes.npy").stat().st_ino
        assert manifest(on)["rows"] == facts
        for m in (memory, oracle):
            change(m, 160, 1, seed=4)  # three facts: kept past the file until more are added
        assert results(memory) == results(oracle)
    assert manifest(on)["rows"] == facts and (on / "index" / "codes" / "fact.codes.npy").stat().st_ino == written
    with opened(on, "on") as memory, opened(off, "off") as oracle:
        assert results(memory) == results(oracle) and codes_of(memory).mapped


def test_damaged_or_foreign_codes_are_not_used(pair: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    on, off = pair
    folder = on / "index" / "codes"
    data = bytearray((folder / "fact.codes.npy").read_bytes())
    data[len(data) // 2] ^= 0xFF  # one code changed: its score would be off
    (folder / "fact.codes.npy").write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING), opened(on, "on") as memory, opened(off, "off") as oracle:
        assert results(memory) == results(oracle)
        assert not codes_of(memory).mapped  # encoded again
    assert "fact codes" in caplog.text and "not used" in caplog.text
    assert manifest(on)["state"] == state_token(on)  # written again on close
    with opened(on, "on") as memory, opened(off, "off") as oracle:
        assert results(memory) == results(oracle) and codes_of(memory).mapped
    (folder / "manifest.json").write_text(json.dumps({**manifest(on), "state": "crc32:00000000"}))
    with opened(on, "on") as memory, opened(off, "off") as oracle:
        assert results(memory) == results(oracle)
        assert not codes_of(memory).mapped  # codes of another saved state's rows
    assert manifest(on)["state"] == "crc32:00000000"  # a close without changes leaves them (maybe newer) alone


def test_codes_of_the_former_format_are_encoded_again_and_replaced(pair: tuple[Path, Path]) -> None:
    """A memory saved with format 1 (faiss's scalar quantizer in fact.faiss): its manifest, though it names the
    saved state, is not read; the first query encodes, and the close writes format 2 and removes fact.faiss."""
    on, off = pair
    folder = on / "index" / "codes"
    (folder / "fact.codes.npy").unlink()
    (folder / "fact.faiss").write_bytes(b"format 1 codes")
    (folder / "manifest.json").write_text(
        json.dumps({"format": 1, "files": {"fact.faiss": "crc32:00000000"}, "state": manifest(on)["state"]})
    )
    with opened(on, "on") as memory, opened(off, "off") as oracle:
        assert results(memory) == results(oracle)
        assert not codes_of(memory).mapped
    assert manifest(on)["format"] == 2 and manifest(on)["state"] == state_token(on)
    assert (folder / "fact.codes.npy").exists() and not (folder / "fact.faiss").exists()
    with opened(on, "on") as memory, opened(off, "off") as oracle:
        assert results(memory) == results(oracle) and codes_of(memory).mapped


def test_the_checksum_begun_at_open_is_used_unless_the_file_changed(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening starts the codes file's checksum on a thread; the first query takes its result (the file is not
    hashed again), but not when the file was replaced after the check began: then the new file is checked."""
    from engram.index.saved import codes_cache

    on, off = pair
    folder = on / "index" / "codes"

    def no_second_hash(*args: object) -> None:
        raise AssertionError("the codes were hashed again")

    with monkeypatch.context() as patch:
        patch.setattr(codes_cache, "verify_files", no_second_hash)
        with opened(on, "on") as memory, opened(off, "off") as oracle:
            assert results(memory) == results(oracle)
            assert codes_of(memory).mapped
    with caplog.at_level(logging.WARNING), opened(on, "on") as memory, opened(off, "off") as oracle:
        memory.stats()  # opened: the state is read, the codes' check begun
        loader = memory.live.state.caches.fact_codes.loader  # type: ignore[union-attr]
        assert isinstance(loader, functools.partial) and loader.args[2] is not None
        assert loader.args[2].error() == ""  # open's check passed on the file as it was
        data = bytearray((folder / "fact.codes.npy").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (folder / "swap.npy").write_bytes(bytes(data))
        (folder / "swap.npy").replace(folder / "fact.codes.npy")  # a new file after open's check began
        assert results(memory) == results(oracle)
        assert not codes_of(memory).mapped  # the new file failed its own check: encoded again
    assert "does not match its checksum" in caplog.text
