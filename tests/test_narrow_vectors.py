"""Issue 54: phrase and fact vectors stored as float16 (engram.index.state.rows.Rows with a dtype; docs/format.md;
the default since is int8 facts, tests/test_packed_rows.py).
Oracles: numpy's own float16 rounding of the same rows, np.save of the rounded matrix, and a memory built whole as
float32 for a memory made before the change."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram import Memory
from engram.embed import HashEmbedder
from engram.errors import InputError, MemoryFormatError
from engram.index.live import live_index
from engram.index.state.rows import Rows
from engram.store.snapshot import _write_npy
from test_rows import one_by_one
from test_snapshot_parts import corpus, newest, rankings


def narrow_blocks(tmp_path: Path) -> tuple[Rows, np.ndarray]:
    """A float16 `Rows`: a saved float16 file mapped, appends of float32 rows (rounded when appended) and a spill;
    with the float32 matrix it must read as (numpy's rounding of every row, widened back)."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((40, 8)).astype(np.float16)
    np.save(tmp_path / "m.npy", base)
    rows = Rows(8, np.float16)
    rows.adopt(np.load(tmp_path / "m.npy", mmap_mode="c"))
    added = [rng.standard_normal((n, 8)).astype(np.float32) for n in (3, 30, 5)]
    rows.append(added[0])
    rows.append(added[1])
    assert rows.spill(tmp_path / "spill", least=1)
    rows.append(added[2])
    whole = np.vstack([base.astype(np.float32), *(a.astype(np.float16).astype(np.float32) for a in added)])
    return rows, whole


def test_float16_rows_read_as_their_rounded_float32(tmp_path: Path) -> None:
    rows, whole = narrow_blocks(tmp_path)
    view = rows.view()
    assert all(block.dtype == np.float16 for block in view.blocks) and len(view.blocks) == 3
    assert np.asarray(view).dtype == np.float32 and np.array_equal(np.asarray(view), whole)
    for key in (0, 39, 40, -1, slice(2, 30), slice(38, 50), np.array([77, 0, 41, 40, 5])):
        got = view[key]
        assert got.dtype == np.float32 and np.array_equal(got, whole[key])
    picks = np.array([45, 2, 73, 40, 39, 75, 3], dtype=np.int64)  # saved, spilled and appended rows, read from files
    assert np.array_equal(rows.gather(view, picks), whole[picks])
    vector = np.random.default_rng(8).standard_normal(8).astype(np.float32)
    assert np.array_equal(view.dots(vector), one_by_one(whole, vector))  # the float32 dots of the widened rows
    for limit in (0, 39, 41, 500):
        assert np.array_equal(view.dots(vector, limit), one_by_one(whole[:limit], vector))


def test_float16_rows_round_once_and_save_as_float16(tmp_path: Path) -> None:
    rows, whole = narrow_blocks(tmp_path)
    rows.set_row(41, np.full(8, 1 / 3, dtype=np.float32))
    whole[41] = np.float32(np.float16(1 / 3))
    written, expected = io.BytesIO(), io.BytesIO()
    _write_npy(written, rows.blocks())
    np.save(expected, whole.astype(np.float16), allow_pickle=False)  # exact: the rows are float16 values
    assert written.getvalue() == expected.getvalue()
    converted = Rows(8, np.float16)  # a float32 matrix adopted by float16 rows is rounded, and not a saved file
    converted.adopt(np.load(tmp_path / "m.npy").astype(np.float32) + np.float32(1e-4))
    assert converted.parts[0].rows.dtype == np.float16 and converted.saved_parts() == [None]
    with pytest.raises(ValueError, match="float32, float16 or int8"):
        Rows(8, np.int16)


def vector_types(path: Path) -> dict[str, set[str]]:
    folder = newest(path)
    out: dict[str, set[str]] = {}
    for file in folder.glob("*.npy"):
        role = file.name.split(".")[0]
        if role in ("passage", "phrase", "fact"):
            out.setdefault(role, set()).add(str(np.load(file, mmap_mode="r").dtype))
    return out


def meta(path: Path) -> str | None:
    with sqlite3.connect(path / "engram.sqlite") as db:
        row = db.execute("SELECT value FROM meta WHERE key = 'vector_dtype'").fetchone()
    return None if row is None else str(row[0])


def build(path: Path, start: int, stop: int, config: dict[str, Any] | None = None) -> None:
    docs, extractions = corpus(12)
    with Memory(path, embedder=HashEmbedder(), config=config) as memory:
        memory.index(docs[start:stop], extractions=extractions[start:stop])


def test_a_float16_memory_stores_phrase_and_fact_vectors_as_float16(tmp_path: Path) -> None:
    build(tmp_path / "m", 0, 8, {"graph": {"vector_precision": "float16"}})
    build(tmp_path / "m", 8, 12)  # the memory keeps float16 under the default setting (int8)
    assert vector_types(tmp_path / "m") == {"passage": {"float32"}, "phrase": {"float16"}, "fact": {"float16"}}
    assert meta(tmp_path / "m") == "float16"
    for name in ("phrase.npy", "fact.npy"):
        matrix = np.load(newest(tmp_path / "m") / name, mmap_mode="r")
        assert (newest(tmp_path / "m") / name).stat().st_size == 128 + matrix.size * 2  # two bytes a number


def float32_memory(monkeypatch: pytest.MonkeyPatch, path: Path, start: int, stop: int) -> None:
    """Build as engram did before float16: float32 vectors and no meta key."""
    with monkeypatch.context() as patch:
        patch.setattr(live_index, "vector_precision", lambda store, made: "float32")
        build(path, start, stop)
    with sqlite3.connect(path / "engram.sqlite") as db:
        db.execute("DELETE FROM meta WHERE key = 'vector_dtype'")


def test_a_memory_made_before_keeps_float32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old, whole = tmp_path / "old", tmp_path / "whole"
    float32_memory(monkeypatch, old, 0, 8)
    assert meta(old) is None and vector_types(old)["phrase"] == {"float32"}
    build(old, 8, 12)  # opened as it is now: it goes on in float32, and says so
    assert vector_types(old) == {"passage": {"float32"}, "phrase": {"float32"}, "fact": {"float32"}}
    assert meta(old) == "float32"
    float32_memory(monkeypatch, whole, 0, 12)
    with Memory(old, embedder=HashEmbedder()) as a, Memory(whole, embedder=HashEmbedder()) as b:
        assert rankings(a) == rankings(b)


def test_an_unknown_vector_type_is_refused(tmp_path: Path) -> None:
    build(tmp_path / "m", 0, 4)
    with sqlite3.connect(tmp_path / "m" / "engram.sqlite") as db:
        db.execute("UPDATE meta SET value = 'bfloat16' WHERE key = 'vector_dtype'")
    refused = pytest.raises(MemoryFormatError, match=r"stores its vectors as 'bfloat16'.*upgrade engram")
    with refused, Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.retrieve(["Person 1"], top_k=1)


def test_the_precision_is_chosen_when_a_memory_is_made(tmp_path: Path) -> None:
    wide = {"graph": {"vector_precision": "float32"}}
    build(tmp_path / "m", 0, 8, wide)
    assert vector_types(tmp_path / "m")["fact"] == {"float32"} and meta(tmp_path / "m") == "float32"
    build(tmp_path / "m", 8, 12)  # the default setting does not change a memory made float32
    assert vector_types(tmp_path / "m")["fact"] == {"float32"} and meta(tmp_path / "m") == "float32"
    build(tmp_path / "n", 0, 4)
    build(tmp_path / "n", 4, 8, wide)  # nor the other way round
    assert vector_types(tmp_path / "n")["fact"] == {"int8"} and meta(tmp_path / "n") == "int8"
    with pytest.raises(InputError, match="vector_precision must be float16, float32 or int8"):
        Memory(tmp_path / "o", embedder=HashEmbedder(), config={"graph": {"vector_precision": "float64"}})
