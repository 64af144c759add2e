"""Issue 54: fact vectors stored as 8-bit codes with a scale per row (`graph.vector_precision = "int8"`,
engram.store.packed_rows; docs/format.md "Vector precision"). Oracles: the coding written out here with numpy
from its definition (codes rint(127 v / max |v|), value codes x float32(1 / ||codes||)), np.save of the coded
matrix, and memories built in one go, change by change, and reopened from a state rebuilt from the records."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engram import Memory
from engram.embed import HashEmbedder
from engram.index.state.rows import Rows
from engram.store import packed_rows
from engram.store.packed_rows import pack, packed_width, unpack
from engram.store.snapshot import _write_npy
from test_rows import one_by_one
from test_snapshot_parts import corpus, newest, rankings

INT8 = {"graph": {"vector_precision": "int8"}}
FLOAT16 = {"graph": {"vector_precision": "float16"}}


def coded(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, the float32 rows they read back as), from the definition, in float64 where it matters."""
    wide = np.asarray(rows, dtype=np.float64)
    codes = np.rint(127 * wide / np.abs(wide).max(axis=1, keepdims=True)).astype(np.int8)
    scales = (1.0 / np.linalg.norm(codes.astype(np.float64), axis=1)).astype(np.float32)
    return codes, codes.astype(np.float32) * scales[:, None]


def unit_rows(count: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_row_is_coded_on_its_own_and_reads_back_of_length_one() -> None:
    rows = unit_rows(200, 384, seed=1)
    codes, want = coded(rows)
    packed = pack(rows)
    assert packed.dtype == np.int8 and packed.shape == (200, packed_width(384)) == (200, 388)
    assert np.array_equal(packed[:, :384], codes)
    assert np.array_equal(unpack(packed), want)
    assert np.array_equal(pack(rows[7]), packed[7]) and np.array_equal(unpack(packed[7]), want[7])  # alone
    assert np.abs(np.linalg.norm(want.astype(np.float64), axis=1) - 1).max() < 1e-6
    cosines = np.einsum("ij,ij->i", want.astype(np.float64), rows.astype(np.float64))
    assert cosines.min() > 0.999  # the row's direction, to about 1e-3 of a cosine
    assert not unpack(pack(np.zeros((1, 8), np.float32))).any()  # a zero row stays zero
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packed_rows, "SLICE_ROWS", 7)  # coded a slice at a time: the same rows
        assert np.array_equal(pack(rows), packed)


def packed_blocks(tmp_path: Path) -> tuple[Rows, np.ndarray]:
    """Packed `Rows`: a saved packed file mapped, appends of float32 rows (coded when appended) and a spill; with
    the float32 matrix they must read as."""
    base = unit_rows(40, 8, seed=2)
    np.save(tmp_path / "m.npy", pack(base))
    rows = Rows(8, np.int8)
    rows.adopt(np.load(tmp_path / "m.npy", mmap_mode="c"))
    added = [unit_rows(n, 8, seed=3 + n) for n in (3, 30, 5)]
    rows.append(added[0])
    rows.append(added[1])
    assert rows.spill(tmp_path / "spill", least=1)
    rows.append(added[2])
    return rows, np.vstack([coded(base)[1], *(coded(a)[1] for a in added)])


def test_packed_rows_read_as_their_coded_float32(tmp_path: Path) -> None:
    rows, whole = packed_blocks(tmp_path)
    view = rows.view()
    assert all(block.dtype == np.int8 and block.shape[1] == 12 for block in view.blocks) and len(view.blocks) == 3
    assert view.shape == (78, 8) and np.array_equal(np.asarray(view), whole)
    for key in (0, 39, 40, -1, slice(2, 30), slice(38, 50), np.array([77, 0, 41, 40, 5])):
        got = view[key]
        assert got.dtype == np.float32 and np.array_equal(got, whole[key])
    picks = np.array([45, 2, 73, 40, 39, 75, 3], dtype=np.int64)  # saved, spilled and appended rows, from files
    assert np.array_equal(rows.gather(view, picks), whole[picks])
    vector = np.random.default_rng(9).standard_normal(8).astype(np.float32)
    assert np.array_equal(view.dots(vector), one_by_one(whole, vector))
    rows.set_row(41, np.full(8, 8**-0.5, dtype=np.float32))  # coded as any appended row
    whole[41] = coded(np.full((1, 8), 8**-0.5))[1][0]
    assert np.array_equal(np.asarray(rows.view()), whole)
    written, expected = io.BytesIO(), io.BytesIO()
    _write_npy(written, rows.blocks())
    np.save(expected, np.vstack([np.asarray(b) for b in rows.blocks()]), allow_pickle=False)
    assert written.getvalue() == expected.getvalue()
    converted = Rows(8, np.int8)  # float16 rows adopted by packed ones are coded, and not a saved file
    converted.adopt(whole[:10].astype(np.float16))
    assert converted.saved_parts() == [None]
    assert np.array_equal(np.asarray(converted.view()), coded(whole[:10].astype(np.float16))[1])


def vector_types(path: Path) -> dict[str, set[tuple[str, int]]]:
    out: dict[str, set[tuple[str, int]]] = {}
    for file in newest(path).glob("*.npy"):
        role = file.name.split(".")[0]
        if role in ("passage", "phrase", "fact"):
            matrix = np.load(file, mmap_mode="r")
            out.setdefault(role, set()).add((str(matrix.dtype), int(matrix.shape[1])))
    return out


def test_a_memory_made_int8_stores_its_facts_packed_and_reads_the_same_however_built(tmp_path: Path) -> None:
    docs, extractions = corpus(12)
    with Memory(tmp_path / "a", embedder=HashEmbedder()) as memory:  # int8 is the default for a new memory
        memory.index(docs[:5], extractions=extractions[:5])
    with Memory(tmp_path / "a", embedder=HashEmbedder(), config=FLOAT16) as memory:  # which keeps its precision
        memory.index(docs[5:], extractions=extractions[5:])
        grown = rankings(memory)
    dim = HashEmbedder().dim
    assert vector_types(tmp_path / "a") == {
        "passage": {("float16", dim)},
        "phrase": {("float16", dim)},
        "fact": {("int8", dim + 4)},
    }
    with sqlite3.connect(tmp_path / "a" / "engram.sqlite") as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'vector_dtype'").fetchone() == ("int8",)
    with Memory(tmp_path / "b", embedder=HashEmbedder(), config=INT8) as memory:
        memory.index(docs, extractions=extractions)
        assert rankings(memory) == grown
    for state in (tmp_path / "a" / "index").glob("g*/state.json"):
        state.unlink()  # the state is rebuilt from the records, its vectors read from the snapshot's packed rows
    with Memory(tmp_path / "a", embedder=HashEmbedder()) as memory:
        assert rankings(memory) == grown
    with Memory(tmp_path / "c", embedder=HashEmbedder(), config=FLOAT16) as memory:  # float16: close, not the same
        memory.index(docs, extractions=extractions)
        wide = rankings(memory)
    assert [[i for i, _ in r] for r in wide] == [[i for i, _ in r] for r in grown]
    assert max(abs(a[1] - b[1]) for x, y in zip(wide, grown) for a, b in zip(x, y)) < 0.05
