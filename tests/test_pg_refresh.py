"""A process on a PostgreSQL memory refreshes after another process's commits by replaying the commit log
(engram.index.refresh) instead of reloading every record: it keeps its state object, and what it then holds and
answers is, to the bit, what the writer holds and what a fresh open builds. Where the log cannot describe the
commits (a generation without an entry, as an engram without the log commits it; an unreadable entry), it
reloads, with the same result."""

from __future__ import annotations

import itertools
import logging
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engram import Memory
from engram.embed import HashEmbedder
from engram.store.pg_schema import connect, split_url
from fake_openai import FakeOpenAI, openie_answer
from helpers import DOCS
from pg_fixture import pg_server, pg_url, with_schema  # noqa: F401
from test_backends import DOCS as MILL_DOCS
from test_backends import EXTRACTIONS as MILL_EXTRACTIONS
from test_backends import open_memory
from test_continual import Live, apply, observe, operation, same

_runs = itertools.count()


def run_sql(url: str, sql: str) -> None:
    schema = split_url(url)[1]
    conn = connect(url)
    try:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(sql)
    finally:
        conn.close()


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
    pg_server: str,  # noqa: F811
    ops: list[Any],
    every: int,
) -> None:
    url = with_schema(pg_server, f"replay_{uuid.uuid4().hex[:8]}_{next(_runs)}")
    live: Live = {}
    with open_memory(url) as writer, open_memory(url) as reader:
        reader.stats()  # loaded at generation 0
        for step, op in enumerate(ops, 1):
            apply(writer, live, op, {})
            if step % every and step != len(ops):
                continue  # the reader catches up over several commits at once
            state = reader._live.state
            seen = observe(reader)
            assert reader._live.state is state, "reloaded instead of replaying the log"
            assert not state.changes.new_phrases and not state.changes.dead_phrases  # no search left to redo
            same(seen, observe(writer))
        apply(reader, live, ("index", [("doc9", ([("old mill", "is near", "north river")], True, 1))]), {})
        state = writer._live.state
        same(observe(writer), observe(reader))  # the reader's own commit, on its replayed state, replayed back
        assert writer._live.state is state
        with open_memory(url, create=False) as fresh:
            same(observe(fresh), observe(reader))


def test_a_generation_without_a_log_entry_is_reloaded(pg_url: str) -> None:  # noqa: F811
    with open_memory(pg_url) as writer, open_memory(pg_url) as reader:
        writer.index(MILL_DOCS[:2], extractions=MILL_EXTRACTIONS[:2])
        reader.stats()
        writer.index(MILL_DOCS[2:], extractions=MILL_EXTRACTIONS[2:])
        writer.delete(["a"])
        run_sql(pg_url, "DELETE FROM commits WHERE generation = 2")  # as an engram without the log commits
        state = reader._live.state
        seen = observe(reader)
        assert reader._live.state is not state
        same(seen, observe(writer))
        writer.delete(["b"])  # the log is whole again from here: replayed
        state = reader._live.state
        same(observe(reader), observe(writer))
        assert reader._live.state is state


def test_an_unreadable_log_entry_is_reloaded_with_a_warning(
    pg_url: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    with open_memory(pg_url) as writer, open_memory(pg_url) as reader:
        writer.index(MILL_DOCS[:1], extractions=MILL_EXTRACTIONS[:1])
        reader.stats()
        writer.index(MILL_DOCS[1:], extractions=MILL_EXTRACTIONS[1:])
        run_sql(pg_url, """UPDATE commits SET change = '{"added": "b"}' WHERE generation = 2""")
        state = reader._live.state
        with caplog.at_level(logging.WARNING, logger="engram.index.live"):
            seen = observe(reader)
        assert reader._live.state is not state and "reloading the memory" in caplog.text
        same(seen, observe(writer))


def test_lists_that_name_a_phrase_this_process_lacks_are_reloaded(pg_url: str) -> None:  # noqa: F811
    with open_memory(pg_url) as writer, open_memory(pg_url) as reader:
        writer.index(MILL_DOCS[:1], extractions=MILL_EXTRACTIONS[:1])
        reader.stats()
        writer.index(MILL_DOCS[1:], extractions=MILL_EXTRACTIONS[1:])
        run_sql(pg_url, "INSERT INTO synonyms (phrase, neighbour, sim) VALUES ('old mill', 'no such phrase', 0.9)")
        run_sql(pg_url, """UPDATE commits SET change = '{"removed":[],"added":[],"contents":[],"synonyms":["old mill"]}'
                            WHERE generation = 2""")  # fmt: skip
        state = reader._live.state
        observe(reader)
        assert reader._live.state is not state  # the replay found the list inconsistent and reloaded


def test_an_llm_extraction_by_another_process_is_replayed(pg_url: str, fake_llm: FakeOpenAI) -> None:  # noqa: F811
    fake_llm.handler = openie_answer
    embedder = HashEmbedder()
    with Memory(pg_url, embedder=embedder, llm=False) as first, Memory(pg_url, embedder=embedder, llm=False) as reader:
        first.index(DOCS)  # no LLM: every passage pending
        assert reader.stats()["pending"] == len(DOCS)
        with Memory(pg_url, embedder=embedder, llm=fake_llm.chat()) as extractor:
            assert extractor.extract().extracted == len(DOCS)
            state = reader._live.state
            assert reader.stats()["pending"] == 0 and reader._live.state is state
            assert reader._current().canonical() == extractor._current().canonical()
        with Memory(pg_url, embedder=embedder, llm=False) as fresh:  # reloads every record
            question = "Where was the founder of the company born?"
            ours, theirs = reader.retrieve(question, top_k=3)[0], fresh.retrieve(question, top_k=3)[0]
            assert [p.id for p in ours.passages] == [p.id for p in theirs.passages]
            assert [p.score for p in ours.passages] == [p.score for p in theirs.passages]
            assert reader._current().canonical() == fresh._current().canonical()
