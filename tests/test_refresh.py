"""A process refreshes after another process's commits by replaying the commit log (engram.index.live.refresh)
instead of reloading every record, on both backends (a directory's writer still open, so no snapshot of the new
generation exists yet): it keeps its state object, and what it then holds and answers is, to the bit, what the
writer holds and what a fresh open builds. Where the log cannot describe the commits (a generation without an
entry, as an engram without the log commits it; an unreadable entry), it reloads, with the same result."""

from __future__ import annotations

import itertools
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engram import Memory
from engram.embed import HashEmbedder
from engram.store.pg_schema import connect, split_url
from engram.store.snapshot import snapshot_dir
from fake_openai import FakeOpenAI, openie_answer
from helpers import DOCS
from pg_fixture import pg_server  # noqa: F401
from rooms import Rooms
from test_backends import DOCS as MILL_DOCS
from test_backends import EXTRACTIONS as MILL_EXTRACTIONS
from test_backends import Target, open_memory, target  # noqa: F401
from test_continual import CONFIG, Live, apply, observe, operation, same

_runs = itertools.count()


def run_sql(where: str | Path, sql: str) -> None:
    """Run `sql` on a memory's records, as another program would."""
    if isinstance(where, Path):
        with sqlite3.connect(where / "engram.sqlite") as db:
            db.execute(sql)
        return
    conn = connect(where)
    try:
        conn.execute(f'SET search_path TO "{split_url(where)[1]}"')
        conn.execute(sql)
    finally:
        conn.close()


@contextmanager
def caught_up(where: str | Path, first: int = 1) -> Iterator[tuple[Memory, Memory]]:
    """(writer, reader): the writer indexed the first `first` mill documents, the reader loaded that, then the
    writer indexed the rest (the reader has not read since)."""
    with open_memory(where) as writer, open_memory(where) as reader:
        writer.index(MILL_DOCS[:first], extractions=MILL_EXTRACTIONS[:first])
        reader.stats()
        writer.index(MILL_DOCS[first:], extractions=MILL_EXTRACTIONS[first:])
        yield writer, reader


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.lists(operation, min_size=1, max_size=5), st.integers(1, 3))
@example(  # two phrases that die here keep no synonym edge (found by this test)
    ops=[
        ("index", [("doc0", ([], False, 0))]),
        ("update", ("doc0", ([("Anna Berg", "is near", "Anna Bergström")], True, 0))),
        ("delete", ["doc0"]),
    ],
    every=1,
)
def test_a_reader_replays_each_commit_and_holds_what_the_writer_holds(
    target: Target,  # noqa: F811
    ops: list[Any],
    every: int,
) -> None:
    url = target(f"replay{next(_runs)}")
    live: Live = {}
    with open_memory(url) as writer, Rooms(url, HashEmbedder(dim=64), CONFIG) as reader:
        reader.stats()  # loaded at generation 0
        for step, op in enumerate(ops, 1):
            apply(writer, live, op, {})
            if step % every and step != len(ops):
                continue  # the reader catches up over several commits at once
            state = reader.live.state
            seen = observe(reader)
            assert reader.live.state is state, "reloaded instead of replaying the log"
            assert not state.changes.new_phrases and not state.changes.dead_phrases  # no search left to redo
            same(seen, observe(writer))
        apply(reader, live, ("index", [("doc9", ([("old mill", "is near", "north river")], True, 1))]), {})
        loads = writer.index_loads
        same(observe(writer), observe(reader))  # the reader's own commit, on its replayed state, replayed back
        assert writer.index_loads == loads
        with open_memory(url, create=False) as fresh:
            same(observe(fresh), observe(reader))


def test_a_generation_without_a_log_entry_is_reloaded(target: Target) -> None:  # noqa: F811
    where = target("m")
    with caught_up(where, first=2) as (writer, reader):
        writer.delete(["a"])
        run_sql(where, "DELETE FROM commits WHERE generation = 2")  # as an engram without the log commits
        loads = reader.index_loads
        seen = observe(reader)
        assert reader.index_loads > loads
        same(seen, observe(writer))
        writer.delete(["b"])  # the log is whole again from here: replayed
        loads = reader.index_loads
        same(observe(reader), observe(writer))
        assert reader.index_loads == loads


def test_an_unreadable_log_entry_is_reloaded_with_a_warning(
    target: Target,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    where = target("m")
    with caught_up(where) as (writer, reader):
        run_sql(where, """UPDATE commits SET change = '{"added": "b"}' WHERE generation = 2""")
        loads = reader.index_loads
        with caplog.at_level(logging.WARNING, logger="engram.index.live.live_index"):
            seen = observe(reader)
        assert reader.index_loads > loads and "reloading the memory" in caplog.text
        same(seen, observe(writer))


def test_lists_that_name_a_phrase_this_process_lacks_are_reloaded(target: Target) -> None:  # noqa: F811
    where = target("m")
    with caught_up(where) as (_, reader):
        run_sql(where, "INSERT INTO synonyms (phrase, neighbour, sim) VALUES ('old mill', 'no such phrase', 0.9)")
        run_sql(where, """UPDATE commits SET change = '{"removed":[],"added":[],"contents":[],"synonyms":["old mill"]}'
                            WHERE generation = 2""")  # fmt: skip
        loads = reader.index_loads
        observe(reader)
        assert reader.index_loads > loads  # the replay found the list inconsistent and reloaded


def test_an_llm_extraction_by_another_process_is_replayed(target: Target, fake_llm: FakeOpenAI) -> None:  # noqa: F811
    where = target("m")
    fake_llm.handler = openie_answer
    embedder = HashEmbedder()
    with Memory(where, embedder=embedder, llm=False) as first, Memory(where, embedder=embedder, llm=False) as reader:
        first.index(DOCS)  # no LLM: every passage pending
        assert reader.stats()["pending"] == len(DOCS)
        with Memory(where, embedder=embedder, llm=fake_llm.chat()) as extractor:
            assert extractor.extract().extracted == len(DOCS)
            loads = reader.index_loads
            assert reader.stats()["pending"] == 0 and reader.index_loads == loads
            assert reader.graph() == extractor.graph()
        with Memory(where, embedder=embedder, llm=False) as fresh:  # reloads every record
            question = "Where was the founder of the company born?"
            ours, theirs = reader.retrieve(question, top_k=3)[0], fresh.retrieve(question, top_k=3)[0]
            assert [p.id for p in ours.passages] == [p.id for p in theirs.passages]
            assert [p.score for p in ours.passages] == [p.score for p in theirs.passages]
            assert reader.graph() == fresh.graph()


def test_an_older_directory_gets_the_log_at_its_next_open(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m") as memory:
        memory.index(MILL_DOCS[:1], extractions=MILL_EXTRACTIONS[:1])
    run_sql(tmp_path / "m", "DROP TABLE commits")  # as a memory written before the log
    with open_memory(tmp_path / "m") as writer, open_memory(tmp_path / "m") as reader:
        reader.stats()
        writer.index(MILL_DOCS[1:], extractions=MILL_EXTRACTIONS[1:])
        loads = reader.index_loads
        same(observe(reader), observe(writer))
        assert reader.index_loads == loads


def test_a_directory_reader_that_replayed_writes_the_new_snapshot_at_its_close(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m") as memory:
        memory.index(MILL_DOCS[:1], extractions=MILL_EXTRACTIONS[:1])  # closed: snapshot of generation 1
    with open_memory(tmp_path / "m") as writer:
        with open_memory(tmp_path / "m") as reader:
            assert reader.stats()["generation"] == 1  # restored from the snapshot: nothing to write
            writer.index(MILL_DOCS[1:], extractions=MILL_EXTRACTIONS[1:])
            loads = reader.index_loads
            assert reader.stats()["generation"] == 2 and reader.index_loads == loads
        assert (snapshot_dir(tmp_path / "m", 2) / "state.json").exists()  # the writer is still open


def test_a_log_row_left_for_the_next_generation_is_replaced_by_its_commit(target: Target) -> None:  # noqa: F811
    where = target("m")
    with open_memory(where) as writer, open_memory(where) as reader:
        writer.index(MILL_DOCS[:1], extractions=MILL_EXTRACTIONS[:1])
        reader.stats()
        stale = '{"removed":["a"],"added":[],"contents":[],"synonyms":[]}'  # as records rolled back leave it
        run_sql(where, f"INSERT INTO commits (generation, change) VALUES (2, '{stale}')")
        writer.index(MILL_DOCS[1:], extractions=MILL_EXTRACTIONS[1:])
        loads = reader.index_loads
        same(observe(reader), observe(writer))
        assert reader.index_loads == loads and "a" in reader.documents()


def test_a_change_too_large_to_log_is_reloaded(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # the second commit lists 2 ids, 2 hashes, 3+ phrases
    monkeypatch.setattr("engram.index.live.refresh.LOG_MAX_ITEMS", 4)
    with caught_up(target("m")) as (writer, reader):
        loads = reader.index_loads
        same(observe(reader), observe(writer))
        assert reader.index_loads > loads  # no row for that commit: reloaded
