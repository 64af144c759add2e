"""Issue 11: the live state's vector rows in two blocks (engram.index.state.rows.Rows / RowView): a saved matrix taken
as it is, and the rows appended since. Oracle: one numpy matrix holding the same rows (np.vstack)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from engram.graph.parallel import row_dots
from engram.index.state.mapped_rows import Pages
from engram.index.state.rows import Rows
from engram.store.snapshot import _write_npy


def two_blocks(tmp_path: Path, saved: int = 40, added: tuple[int, ...] = (3, 1, 30)) -> tuple[Rows, np.ndarray]:
    rng = np.random.default_rng(saved)
    base = rng.standard_normal((saved, 8)).astype(np.float32)
    np.save(tmp_path / "m.npy", base)
    rows = Rows(8)
    rows.adopt(np.load(tmp_path / "m.npy", mmap_mode="c"))
    parts = [base]
    for n in added:
        part = rng.standard_normal((n, 8)).astype(np.float32)
        rows.append(part)
        parts.append(part)
    return rows, np.vstack(parts)


def test_appending_keeps_the_saved_matrix_as_it_is(tmp_path: Path) -> None:
    rows, whole = two_blocks(tmp_path)
    base = rows.parts[0].rows
    assert isinstance(base, np.memmap)
    rows.append(np.ones((100, 8), dtype=np.float32))  # grows the tail, never the base
    assert rows.parts[0].rows is base and rows.size == len(whole) + 100
    view = rows.view()
    assert len(view.blocks) == 2 and np.shares_memory(view.blocks[0], base)


def test_view_reads_as_one_matrix(tmp_path: Path) -> None:
    rows, whole = two_blocks(tmp_path)
    view = rows.view()
    assert len(view) == len(whole) and view.shape == whole.shape
    assert np.array_equal(np.asarray(view), whole)
    for i in (0, 39, 40, 41, 43, 44, len(whole) - 1, -1, -len(whole)):
        assert np.array_equal(view[i], whole[i])
    for key in (slice(0, 40), slice(40, 44), slice(38, 45), slice(10, None), slice(None, None, 3), slice(50, 20)):
        assert np.array_equal(view[key], whole[key])
    picks = np.array([73, 0, 40, 39, 41, 5, 5, -2])
    assert np.array_equal(view[picks], whole[picks])
    mask = np.random.default_rng(1).random(len(whole)) < 0.3
    assert np.array_equal(view[mask], whole[mask])
    with pytest.raises(IndexError):
        view[len(whole)]
    within = view[2:30]
    assert np.shares_memory(within, rows.parts[0].rows)  # rows inside one block are a view of it


def one_by_one(whole: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each row's dot computed alone by the process's kernel (simsimd's or numpy's einsum: they may differ in the
    last bit, so the oracle is the same kernel on one row at a time, not einsum)."""
    return np.array([row_dots(whole[i : i + 1], vector)[0] for i in range(len(whole))], dtype=np.float32)


def test_dots_are_those_of_the_whole_matrix(tmp_path: Path) -> None:
    rows, whole = two_blocks(tmp_path)
    vector = np.random.default_rng(2).standard_normal(8).astype(np.float32)
    view = rows.view()
    assert np.array_equal(view.dots(vector), one_by_one(whole, vector))
    for limit in (0, 10, 40, 42, 500):
        assert np.array_equal(view.dots(vector, limit), one_by_one(whole[:limit], vector))


def test_set_row_and_a_view_taken_before(tmp_path: Path) -> None:
    rows, whole = two_blocks(tmp_path)
    before = rows.view()
    for row in (3, 41):
        rows.set_row(row, np.full(8, row, dtype=np.float32))
        whole[row] = row
    rows.append(np.zeros((1000, 8), dtype=np.float32))  # reallocates the tail: the older view keeps its rows
    assert np.array_equal(np.asarray(before), whole)
    assert np.load(tmp_path / "m.npy")[3].tolist() != [3.0] * 8  # the saved file is copy-on-write: unchanged


def test_snapshot_file_of_blocks_is_what_np_save_writes(tmp_path: Path) -> None:
    rows, whole = two_blocks(tmp_path, added=(70_000,))
    written, expected = io.BytesIO(), io.BytesIO()
    _write_npy(written, rows.blocks())
    np.save(expected, whole, allow_pickle=False)
    assert written.getvalue() == expected.getvalue()
    empty = io.BytesIO()
    _write_npy(empty, Rows(8).blocks())
    assert np.load(io.BytesIO(empty.getvalue())).shape == (0, 8)


def test_spilled_rows_read_write_and_save_as_before(tmp_path: Path) -> None:
    rows, whole = two_blocks(tmp_path)
    original = whole.copy()
    assert not rows.spill(tmp_path / "spill", least=40)  # 34 appended rows: fewer than asked, nothing moves
    before = rows.view()
    tail = rows.tail
    assert rows.spill(tmp_path / "spill", least=1)
    assert rows.tail_size == 0 and len(rows.spilled) == 1 and not list((tmp_path / "spill").iterdir())  # unnamed
    assert not np.shares_memory(rows.spilled[0].rows, tail)
    more = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    rows.append(more)
    rows.spill(tmp_path / "spill", least=1)
    rows.append(more[:2])
    whole = np.vstack([whole, more, more[:2]])
    view = rows.view()
    assert len(view.blocks) == 4 and np.array_equal(np.asarray(view), whole)
    vector = np.random.default_rng(4).standard_normal(8).astype(np.float32)
    assert np.array_equal(view.dots(vector), one_by_one(whole, vector))
    for row in (3, 45, 75, len(whole) - 1):  # base, first spill, second spill, tail
        rows.set_row(row, np.full(8, row, dtype=np.float32))
        whole[row] = row
    rows.release()  # the pages go; the rows, the changes included, are read again from the file's pages
    assert np.array_equal(np.asarray(rows.view()), whole)
    original[3] = 3  # the base is shared with the view taken before the spill; its tail is not
    assert np.array_equal(np.asarray(before), original)
    written, expected = io.BytesIO(), io.BytesIO()
    released: list[int] = []
    _write_npy(written, rows.blocks(), lambda part: (released.append(len(part)), rows.release(part)))
    np.save(expected, whole, allow_pickle=False)
    assert written.getvalue() == expected.getvalue() and sum(released) == len(whole)


def resident_kib(kind: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{kind}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {kind}")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident size from /proc")
def test_spilled_rows_leave_the_process_memory(tmp_path: Path) -> None:
    """Oracle: the kernel's count of this process's resident memory (VmRSS), around 128 MiB of rows."""
    rows = Rows(256)
    rows.append(np.random.default_rng(5).standard_normal((131_072, 256)).astype(np.float32))
    with_tail = resident_kib()
    rows.spill(tmp_path)
    spilled = resident_kib()
    assert with_tail - spilled > 100 * 1024  # the tail's 128 MiB left the process
    total = float(np.asarray(rows.view()).sum())  # reads every row: the file's pages are mapped in
    assert resident_kib() - spilled > 100 * 1024
    rows.release()
    assert resident_kib() - spilled < 20 * 1024 and float(np.asarray(rows.view()).sum()) == total


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident size from /proc")
def test_a_saved_base_written_out_leaves_the_process_memory_unless_changed(tmp_path: Path) -> None:
    """Writing a snapshot drops the pages of the saved rows it wrote (oracle: VmRSS), except when a row of the
    copy-on-write base was changed: that page holds the only copy of the change."""
    matrix = np.random.default_rng(6).standard_normal((131_072, 256)).astype(np.float32)
    np.save(tmp_path / "m.npy", matrix)
    del matrix
    rows = Rows(256)
    rows.adopt(np.load(tmp_path / "m.npy", mmap_mode="c"))
    opened = resident_kib()
    _write_npy(io.BytesIO(), rows.blocks())  # reads every page, keeps them
    assert resident_kib() - opened > 100 * 1024
    _write_npy(io.BytesIO(), rows.blocks(), rows.release)
    assert resident_kib() - opened < 20 * 1024
    rows.set_row(7, np.full(256, 7.0, dtype=np.float32))
    _write_npy(out := io.BytesIO(), rows.blocks(), rows.release)
    assert np.load(io.BytesIO(out.getvalue()))[7].tolist() == [7.0] * 256
    assert rows.view()[7].tolist() == [7.0] * 256  # the change outlived the write
    assert Pages.of(np.load(tmp_path / "m.npy", mmap_mode="r")) is None  # read-only: nothing to give back
    assert Pages.of(np.zeros((4, 256), dtype=np.float32)) is None  # rows in RAM


def test_row_sets_read_the_saved_arrays_as_the_sets_they_came_from() -> None:
    """Oracle: the list of frozensets the arrays were made from, through reads, replacements and appends."""
    from engram.index.state.saved_tables import RowSets

    rng = np.random.default_rng(3)
    sets = [frozenset(rng.choice(50, int(rng.integers(0, 6)), replace=False).tolist()) for _ in range(40)]
    lengths = [len(s) for s in sets]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.array([r for s in sets for r in sorted(s)], dtype=np.int64)
    table = RowSets()
    table.restore(offsets, rows)
    assert len(table) == 40 and table[7] == sets[7] and table[-1] == sets[-1]
    table[3] = sets[3] = frozenset({99})
    table.append(frozenset({1, 2}))
    sets.append(frozenset({1, 2}))
    assert list(table) == sets
    for bad in ((offsets[:-1], rows), (offsets[::-1].copy(), rows)):
        with pytest.raises(ValueError):
            RowSets().restore(*bad)


def test_pairs_read_the_saved_array_then_the_appended_pairs() -> None:
    """Oracle: the list of tuples the array was made from, with pairs appended after it."""
    from engram.index.state.saved_tables import Pairs

    listed = [(int(a), int(b)) for a, b in np.random.default_rng(4).integers(0, 90, (30, 2))]
    pairs = Pairs()
    pairs.restore(np.array(listed, dtype=np.int64))
    pairs.append((5, 6))
    listed.append((5, 6))
    assert len(pairs) == 31 and [pairs[i] for i in range(31)] == listed and pairs[-1] == (5, 6)
    assert pairs.added_since(30) == [(5, 6)] and pairs[0] == listed[0]
    with pytest.raises(ValueError):
        pairs.added_since(3)
    with pytest.raises(ValueError):
        pairs.restore(np.zeros((2, 2), dtype=np.int64))  # not empty


def test_triples_read_the_saved_arrays_as_the_facts_they_came_from() -> None:
    """Oracle: the list of (subject, relation, object) tuples the arrays were made from, with facts appended
    after them; a view keeps its length while the table grows."""
    from engram.index.state.saved_tables import Triples

    rng = np.random.default_rng(6)
    phrases, relations = [f"p{i}" for i in range(40)], ["is in", "born in", "part of"]
    pairs, verbs = rng.integers(0, 40, (25, 2)), rng.integers(0, 3, 25)
    listed = [(phrases[s], relations[v], phrases[o]) for (s, o), v in zip(pairs.tolist(), verbs.tolist())]
    table = Triples()
    table.restore(phrases, relations, pairs, verbs)
    view = table.upto(len(table))
    table.append(("x", "is in", "y"))
    listed.append(("x", "is in", "y"))
    assert len(table) == 26 and list(table) == listed and table.listed() == listed and table.saved() == listed[:25]
    assert [table[i] for i in range(26)] == listed and table[-1] == listed[-1] and table[3:6] == listed[3:6]
    assert len(view) == 25 and list(view) == listed[:25] and view[-1] == listed[24] and view[:2] == listed[:2]
    with pytest.raises(IndexError):
        view[25]
    for bad in ((pairs, verbs[:3]), (pairs + 40, verbs), (pairs, verbs + 3)):
        with pytest.raises(ValueError):
            Triples().restore(phrases, relations, *bad)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident size from /proc")
def test_a_scattered_gather_maps_no_pages(tmp_path: Path) -> None:
    """`Rows.gather` reads every 16th row of a mapped 128 MiB matrix, and of rows spilled to a file, as indexing
    does (oracle: the matrix itself) without mapping their pages into the process (oracle: RssFile, the resident
    pages of mapped files), where plain indexing maps nearly the whole file: a fault maps the cached pages around
    it too. A part `set_row` wrote to is read from the process's copy (the file no longer holds its rows)."""
    matrix = np.random.default_rng(7).standard_normal((131_072, 256)).astype(np.float32)
    np.save(tmp_path / "m.npy", matrix)
    picked = np.arange(3, len(matrix), 16, dtype=np.int64)  # 8,192 rows, 16 KiB apart
    rows = Rows(256)
    rows.adopt(np.load(tmp_path / "m.npy", mmap_mode="c"))
    runs = np.array([9, 10, 11, 4, 5, 100, 99, 0, 0, 1], dtype=np.int64)  # runs, steps back, a repeat: one block
    assert np.array_equal(rows.gather(rows.view(), runs), matrix[runs])
    spilled = np.random.default_rng(8).standard_normal((40_000, 256)).astype(np.float32)
    rows.append(spilled)
    assert rows.spill(tmp_path)
    rows.append(spilled[:5])  # rows in RAM too
    whole = np.concatenate([matrix, spilled, spilled[:5]])
    view = rows.view()
    opened = resident_kib("RssFile")
    plain = view[picked]
    if resident_kib("RssFile") - opened < 64 * 1024:
        pytest.skip("this kernel maps no pages around a fault: nothing to keep out")
    rows.release()
    ends = [len(whole) - 1, 5, 6, 7, 3, 20, len(matrix) + 1, 21]  # 20 and 21: consecutive rows, places apart
    wanted = np.concatenate([picked, len(matrix) + np.arange(7, 40_000, 16), ends])
    opened = resident_kib("RssFile")
    gathered = rows.gather(view, wanted)
    assert resident_kib("RssFile") - opened < 1024  # no page of the files mapped
    assert np.array_equal(gathered, whole[wanted]) and np.array_equal(gathered[: len(picked)], plain)
    rows.set_row(3, np.full(256, 2.0, dtype=np.float32))
    assert (rows.gather(rows.view(), np.array([3, 4]))[0] == 2.0).all()
    assert rows.gather(view, np.zeros(0, dtype=np.int64)).shape == (0, 256)
    with pytest.raises(IndexError):
        rows.gather(view, np.array([len(whole)]))
