"""Issue 11: the live state saved with each vector snapshot (engram.index.saved.state_file) and taken back on open.

Oracle: the same memory opened with the saved state removed, which rebuilds the state from the records (the
path every earlier version took), and the independent batch builder of test_continual."""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram import Memory
from engram.embed import HashEmbedder
from engram.index.saved.state_file import KEY_TABLES, restore_state
from engram.store.records import RecordStore
from test_continual import CONFIG, Live, apply, matches_oracle, observe, operation, oracle_graph, same

NARROW = "int8"  # how a memory made now stores its vectors (docs/format.md, "Vector precision")


def latest_snapshot(path: Path) -> Path:
    return max((path / "index").glob("g*"), key=lambda p: int(p.name[1:]))


def saved_state_loads(path: Path) -> bool:
    folder = latest_snapshot(path)
    store = RecordStore(path / "engram.sqlite")
    try:
        generation = store.generation
        state = restore_state(path, generation, store.passages, 64, CONFIG.graph, NARROW)
    finally:
        store.close()
    return folder.name == f"g{generation}" and state is not None


def run(path: Path, before: list[Any], after: list[Any], records: bool) -> tuple[dict[str, Any], Live, dict[Any, Any]]:
    """Apply `before`, close, reopen (from the saved state, or from the records when `records`), apply `after`."""
    live: Live = {}
    known: dict[Any, Any] = {}
    with Memory(path, embedder=HashEmbedder(dim=64), config=CONFIG) as memory:
        for op in before:
            apply(memory, live, op, known)
    assert saved_state_loads(path)
    if records:
        (latest_snapshot(path) / "state.json").unlink()
    with Memory(path, embedder=HashEmbedder(dim=64), config=CONFIG) as memory:
        for op in after:
            apply(memory, live, op, known)
        seen = observe(memory)
    if not records:  # the state a restored process saves after its changes opens as it was
        assert saved_state_loads(path)
        pairs = np.load(latest_snapshot(path) / "state-relation_pairs.npy")
        assert all(tuple(a) < tuple(b) for a, b in zip(pairs.tolist(), pairs[1:].tolist()))  # saved sorted
        with Memory(path, embedder=HashEmbedder(dim=64), config=CONFIG) as memory:
            same(observe(memory), seen)
    return seen, live, known


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=5), st.lists(operation, min_size=0, max_size=3))
def test_saved_state_equals_the_records_and_keeps_learning(before: list[Any], after: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        saved, live, known = run(Path(tmp) / "saved", before, after, records=False)
        rebuilt, _, _ = run(Path(tmp) / "records", before, after, records=True)
        same(saved, rebuilt)
        matches_oracle(saved["graph"], oracle_graph(live, known, HashEmbedder(dim=64)))


def build(path: Path) -> None:
    live: Live = {}
    known: dict[Any, Any] = {}
    ops = [
        ("index", [("doc0", ([("north river", "is near", "old mill")], True, 0))]),
        ("index", [("doc1", ([("Anna Berg", "founded", "old mill town")], True, 1))]),
        ("delete", ["doc0"]),  # a dead passage row, saved in full
    ]
    with Memory(path, embedder=HashEmbedder(dim=64), config=CONFIG) as memory:
        for op in ops:
            apply(memory, live, op, known)


def stored(path: Path) -> tuple[list[Any], int]:
    """The records' passages and generation."""
    store = RecordStore(path / "engram.sqlite")
    try:
        return store.passages(), store.generation
    finally:
        store.close()


def test_state_of_other_passages_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    build(tmp_path)
    passages, generation = stored(tmp_path)
    assert restore_state(tmp_path, generation, lambda: passages, 64, CONFIG.graph, NARROW) is not None
    with caplog.at_level(logging.WARNING, logger="engram"):
        assert restore_state(tmp_path, generation, lambda: [], 64, CONFIG.graph, NARROW) is None  # lost a passage
    assert any("not used" in r.getMessage() for r in caplog.records)
    assert restore_state(tmp_path, generation + 1, lambda: passages, 64, CONFIG.graph, NARROW) is None  # another one
    assert restore_state(tmp_path, generation, lambda: passages, 32, CONFIG.graph, NARROW) is None  # another width
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="engram"):  # the memory's vectors are of another dtype
        assert restore_state(tmp_path, generation, lambda: passages, 64, CONFIG.graph, "float32") is None
    assert any("stored as float16, not as the memory's float32" in r.getMessage() for r in caplog.records)


def test_another_format_is_rebuilt_from_the_records(tmp_path: Path) -> None:
    build(tmp_path)
    with Memory(tmp_path, embedder=HashEmbedder(dim=64), config=CONFIG) as memory:
        expected = observe(memory)
    folder = latest_snapshot(tmp_path)
    meta = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    meta["format"] = 999
    (folder / "state.json").write_text(json.dumps(meta), encoding="utf-8")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    from engram.store.snapshot import file_checksum

    manifest["files"]["state.json"] = file_checksum(folder / "state.json")
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert not saved_state_loads(tmp_path)
    with Memory(tmp_path, embedder=HashEmbedder(dim=64), config=CONFIG) as memory:
        same(observe(memory), expected)
    assert saved_state_loads(tmp_path)  # closing wrote the current format again


def test_reads_leave_the_write_side_tables_unbuilt(tmp_path: Path) -> None:
    """Opening from the saved state and reading (a view, its edges and orders) sorts no key list and makes no
    dict of the facts or relation pairs; lookups by key search the saved arrays and equal what the records
    give, and a few changes patch the fact order without making its key list."""
    from collections import Counter

    from engram.index.view.graph_index import view

    build(tmp_path)
    passages, generation = stored(tmp_path)
    restored = restore_state(tmp_path, generation, lambda: passages, 64, CONFIG.graph, NARROW)
    assert restored is not None
    state = restored[0]
    view(state)
    assert state.fact_order._keys is None and not state.synonyms.lists.changed()
    assert not state.fact_row._added and not state.relation._changed
    assert not state.phrase_row._added and not state.names.word_ids._added  # searched by their saved hashes
    assert dict(state.phrase_row) == {key: row for row, key in enumerate(state.phrases)}
    assert dict(state.names.word_ids) == {word: i for i, word in enumerate(state.names.words)}
    assert all(state.fact_row[fact] == row for row, fact in enumerate(state.facts))
    assert dict(state.fact_row) == {fact: row for row, fact in enumerate(state.facts)}
    joined: Counter[tuple[int, int]] = Counter()  # relation count: alive passages whose facts join the pair
    for row, facts in enumerate(state.passage_facts):
        if state.passage_alive[row]:
            ends = (state.fact_phrases[f] for f in facts)
            joined.update({(min(a, b), max(a, b)) for a, b in ends if a != b})
    assert dict(state.relation) == dict(joined) and len(state.relation) == len(joined)
    first = next(r for r in range(len(state.passages)) if state.passage_alive[r] and state.passage_facts[r])
    state.set_triples(first, "done", [])  # a few facts die: patched by binary search over the saved rows
    fact_alive = lambda rows: np.array([state.fact_support[r] > 0 for r in rows.tolist()], dtype=bool)  # noqa: E731
    alive = state.fact_order.rows(fact_alive)
    assert state.fact_order._keys is None
    expected = sorted(f for r, f in enumerate(state.facts) if state.fact_support[r] > 0)
    assert alive.tolist() == [state.fact_row[f] for f in expected]
    assert state.fact_order.keys(fact_alive) == expected


def test_saved_name_table_carries_its_word_counts(tmp_path: Path) -> None:
    """A close saves the query-name table's word counts even when no view counted them, so the first view after
    opening does not count every passage's words again; they equal a count over the restored passages."""
    build(tmp_path)  # indexes, deletes and closes; nothing read
    passages, generation = stored(tmp_path)
    restored = restore_state(tmp_path, generation, lambda: passages, 64, CONFIG.graph, NARROW)
    assert restored is not None
    names = restored[0].names
    assert names._counts is not None
    counted = names._bulk_counts(restored[0].passage_context, list(restored[0].passage_alive))
    assert names._counts[: len(names.word_ids)].tolist() == counted.tolist()
    assert sum(counted.tolist()) > 0


def test_a_state_saved_before_the_key_tables_is_used(tmp_path: Path) -> None:
    """A snapshot written before the key tables (engram.index.state.key_rows) came: its state is still used, the keys
    go to dicts as before, and the next close saves the tables."""
    build(tmp_path)
    folder = latest_snapshot(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    for name in KEY_TABLES:
        (folder / f"state-{name}.npy").unlink()
        del manifest["files"][f"state-{name}.npy"]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    passages, generation = stored(tmp_path)
    restored = restore_state(tmp_path, generation, lambda: passages, 64, CONFIG.graph, NARROW)
    assert restored is not None
    state = restored[0]
    assert dict(state.phrase_row) == dict(state.phrase_row._added) == {k: r for r, k in enumerate(state.phrases)}
    assert dict(state.names.word_ids) == {word: i for i, word in enumerate(state.names.words)}
    with Memory(tmp_path, embedder=HashEmbedder(dim=64), config=CONFIG) as memory:
        memory.index(["A third passage, about the old mill."])
    assert all((latest_snapshot(tmp_path) / f"state-{name}.npy").exists() for name in KEY_TABLES)


def test_a_damaged_key_table_is_detected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The key tables are checked against the snapshot's checksums like every state file: damage is not used."""
    build(tmp_path)
    table = latest_snapshot(tmp_path) / "state-phrase_hashes.npy"
    table.write_bytes(table.read_bytes()[:-8] + np.uint64(7).tobytes())
    passages, generation = stored(tmp_path)
    with caplog.at_level(logging.WARNING, logger="engram"):
        assert restore_state(tmp_path, generation, lambda: passages, 64, CONFIG.graph, NARROW) is None
    assert any("state-phrase_hashes.npy" in r.getMessage() for r in caplog.records)


def test_a_few_facts_then_many_on_a_restored_state(tmp_path: Path) -> None:
    """A restored fact order takes a few new facts by binary search before its keys are made; a later large
    change then makes every key, appended rows included (it read only the saved facts: an IndexError that
    stopped `engram extract` workers, which replay the others' commits). Oracle: a memory built in one go."""
    from test_snapshot_parts import corpus, rankings

    docs, extractions = corpus(120)
    path = tmp_path / "m"
    with Memory(path, embedder=HashEmbedder()) as memory:
        memory.index(docs[:40], extractions=extractions[:40])
    with Memory(path, embedder=HashEmbedder()) as reader, Memory(path, embedder=HashEmbedder()) as writer:
        reader.stats()  # restored from the saved state
        writer.index(docs[40:41], extractions=extractions[40:41])  # 3 new facts
        rankings(reader)  # replayed: inserted into the restored order one by one
        writer.index(docs[41:], extractions=extractions[41:])  # about 240 more
        got = rankings(reader)  # replayed: one merge of every key
        stats = {k: v for k, v in reader.stats().items() if k != "generation"}
    with Memory(tmp_path / "whole", embedder=HashEmbedder()) as whole:
        whole.index(docs, extractions=extractions)
        assert rankings(whole) == got
        assert {k: v for k, v in whole.stats().items() if k != "generation"} == stats


def test_int64_tables_are_saved_as_int32_and_a_state_saved_before_is_read(tmp_path: Path) -> None:
    """Tables whose values fit int32 are saved so (format 3, named in `narrowed`) and restored as the int64 they
    were; a state saved before (format 2: every table int64, no `narrowed`) restores to the same tables."""
    build(tmp_path)
    folder = latest_snapshot(tmp_path)
    meta = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    assert meta["format"] == 3 and {"fact_phrases", "order_phrase", "facts_rows"} <= set(meta["narrowed"])
    saved = np.load(folder / "state-fact_phrases.npy")
    assert saved.dtype == np.int32
    passages, generation = stored(tmp_path)
    restored = restore_state(tmp_path, generation, lambda: passages, 64, CONFIG.graph, NARROW)
    assert restored is not None
    tables = restored[0].fact_phrase_array()
    assert tables.dtype == np.int64 and np.array_equal(tables, saved)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    for name in meta["narrowed"]:  # as format 2 wrote them
        path = folder / f"state-{name}.npy"
        if path.exists():
            np.save(path, np.load(path).astype(np.int64), allow_pickle=False)
            manifest["files"][path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    del meta["narrowed"]
    meta["format"] = 2
    (folder / "state.json").write_text(json.dumps(meta), encoding="utf-8")
    manifest["files"]["state.json"] = hashlib.sha256((folder / "state.json").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    before = restore_state(tmp_path, generation, lambda: passages, 64, CONFIG.graph, NARROW)
    assert before is not None and np.array_equal(before[0].fact_phrase_array(), tables)
