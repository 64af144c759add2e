"""The same behaviour on both store backends: the memory directory (SQLite + .npy) and PostgreSQL + pgvector
(a real server, started by tests/pg_fixture.py). Index, retrieve, update, delete, reopen, and any sequence of
changes equals a fresh build; the two backends give the same graphs, vectors, rankings and scores."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram import Document, EmbedderMismatchError, InputError, Memory, MemoryFormatError
from engram.embed import HashEmbedder
from engram.store.pg_schema import redact
from pg_fixture import backend_place, pg_server, pg_url, with_schema  # noqa: F401
from test_continual import CONFIG, Live, apply, matches_oracle, observe, operation, oracle_graph, same

Target = Callable[[str], "str | Path"]
DOCS = [
    Document("a", "Anna Berg founded the old mill.", title="Mill"),
    Document("b", "The old mill is near north river.", title="River"),
    Document("c", "Lake Oster lies east of the mill town.", title="Lake"),
]
EXTRACTIONS = [
    {"id": "a", "triples": [["Anna Berg", "founded", "old mill"]]},
    {"id": "b", "triples": [["old mill", "is near", "north river"]]},
    {"id": "c", "triples": [["Lake Oster", "east of", "mill town"]]},
]
_names = itertools.count()


@pytest.fixture(params=["directory", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """name -> where a memory of that name lives on the backend under test (fresh for each test)."""
    return backend_place(request, tmp_path)


def open_memory(where: str | Path, **options: Any) -> Memory:
    return Memory(where, embedder=HashEmbedder(dim=64), llm=False, config=CONFIG, **options)


def test_index_and_retrieve(target: Target) -> None:
    with open_memory(target("m")) as memory:
        report = memory.index(DOCS, extractions=EXTRACTIONS)
        assert report.added == ["a", "b", "c"] and report.stats["facts"] == 3 and report.stats["pending"] == 0
        hits = memory.retrieve("Who founded the old mill?", top_k=2)[0]
        assert hits.passages[0].id == "a" and hits.facts[0].triple[0] == "anna berg"
        assert memory.stats()["documents"] == 3 and memory.stats()["generation"] == 1
        assert memory.documents() == {"a": {}, "b": {}, "c": {}}


def test_update_replaces_the_document(target: Target) -> None:
    with open_memory(target("m")) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        changed = Document("b", "The old mill is near Lake Oster.", title="River")
        report = memory.update(changed, extractions=[{"id": "b", "triples": [["old mill", "is near", "Lake Oster"]]}])
        assert report.documents == 1 and memory.update(changed).unchanged == 1
        graph = memory.graph()
        assert "north river" not in graph.phrases and ("p:lake oster", "p:old mill") in graph.edges


def test_delete_removes_documents_and_their_passages(target: Target) -> None:
    with open_memory(target("m")) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        report = memory.delete(["b", "missing"])
        assert report.documents == 1 and report.skipped == {"missing": "not in the memory"}
        assert set(memory.documents()) == {"a", "c"}
        ranked = memory.retrieve("north river", top_k=5, method="dense")[0].passages
        assert sorted(p.id for p in ranked) == ["a", "c"]


def test_reopen_sees_the_same_memory(target: Target) -> None:
    with open_memory(target("m")) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        memory.delete(["c"])
        before = observe(memory)
    with open_memory(target("m"), create=False) as reopened:
        same(observe(reopened), before)
        assert reopened.stats()["generation"] == 2


def test_a_second_handle_sees_each_commit_at_its_next_read(target: Target) -> None:
    with open_memory(target("m")) as writer, open_memory(target("m")) as reader:
        writer.index(DOCS[:1], extractions=EXTRACTIONS[:1])
        assert [p.id for p in reader.retrieve("old mill", top_k=5, method="dense")[0].passages] == ["a"]
        writer.index(DOCS[1:], extractions=EXTRACTIONS[1:])
        assert len(reader.retrieve("old mill", top_k=5, method="dense")[0].passages) == 3
        reader.delete(["a"])  # the reader writes too, on the generation it has just loaded
        assert set(writer.documents()) == {"b", "c"} and writer.stats()["generation"] == 3


def test_missing_memory_and_other_embedder_are_refused(target: Target) -> None:
    with pytest.raises(MemoryFormatError, match="no memory at"):
        open_memory(target("nothing"), create=False)
    with open_memory(target("m")) as memory:
        memory.index(DOCS[:1])
    with pytest.raises(EmbedderMismatchError, match="same embedder"):
        Memory(target("m"), embedder=HashEmbedder(dim=32), llm=False)


def test_a_load_reads_cached_vectors_a_chunk_at_a_time(pg_server: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A PostgreSQL open asks for cached vectors `LOOKUP_CHUNK` texts at a time and writes them in place: the
    same state to the bit, also for a text two passages share and a key that is no hash (bound as an array)."""
    import engram.index.live.load as commit
    from engram.store.postgres import PostgresStore

    where = with_schema(pg_server, f"chunks_{uuid.uuid4().hex[:8]}")
    twin = Document("d", DOCS[0].text, title=DOCS[0].title)  # same text: one cached vector, two passages
    with open_memory(where) as memory:
        memory.index([*DOCS, twin], extractions=[*EXTRACTIONS, {"id": "d", "triples": [["x", "y", "z"]]}])
        before = observe(memory)
    asked: list[int] = []
    real = PostgresStore.vectors_for

    def counted(self: PostgresStore, model: str, role: str, hashes: Any) -> dict[str, bytes]:
        asked.append(len(hashes))
        return real(self, model, role, hashes)

    monkeypatch.setattr(commit, "LOOKUP_CHUNK", 2)
    monkeypatch.setattr(PostgresStore, "vectors_for", counted)
    with open_memory(where, create=False) as reopened:
        same(observe(reopened), before)
    stats = before["stats"]
    assert max(asked) == 2 and sum(asked) == 3 + stats["phrases"] + stats["facts"]  # 3 passage texts
    store = PostgresStore(where, HashEmbedder(dim=64).identity, create=False)
    try:
        vectors = np.arange(8, dtype=np.float32).reshape(2, 4)
        store.put_vectors("m", "phrase", ["a,b", "c"], vectors)
        found = store.vectors_for("m", "phrase", ["a,b", "c", "missing"])
        assert found == {"a,b": vectors[0].tobytes(), "c": vectors[1].tobytes()}
        store.drop_vectors("m", "phrase", ["a,b", "missing"])
        assert store.vectors_for("m", "phrase", ["a,b", "c"]) == {"c": vectors[1].tobytes()}
    finally:
        store.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.lists(operation, min_size=1, max_size=6))
def test_any_sequence_equals_a_fresh_build(target: Target, ops: list[Any]) -> None:
    run = next(_names)
    live: Live = {}
    known: dict[tuple[Any, str], dict[str, Any]] = {}
    with open_memory(target(f"inc{run}")) as memory:
        for op in ops:
            apply(memory, live, op, known)
        incremental = observe(memory)
    matches_oracle(incremental["graph"], oracle_graph(live, known, HashEmbedder(dim=64)))
    with open_memory(target(f"inc{run}"), create=False) as reopened:
        same(observe(reopened), incremental)
    with open_memory(target(f"fresh{run}")) as fresh:
        extractions = [{**e, "id": d.id} for d, _ in live.values() if (e := known.get((d.title, d.text)))]
        fresh.index([d for d, _ in live.values()], extractions=extractions)
        same(observe(fresh), incremental)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.lists(operation, min_size=1, max_size=6))
def test_both_backends_hold_the_same_memory(
    pg_server: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[Any],
) -> None:
    """Graph, vectors (bit for bit through pgvector's text form), rankings and scores agree."""
    run = next(_names)
    seen = []
    for where in (tmp_path_factory.mktemp("dir") / "m", with_schema(pg_server, f"same_{uuid.uuid4().hex[:8]}_{run}")):
        live: Live = {}
        with open_memory(where) as memory:
            for op in ops:
                apply(memory, live, op, {})
            seen.append(observe(memory))
    same(seen[0], seen[1])


def test_postgres_urls_and_errors(pg_server: str) -> None:  # noqa: F811
    with pytest.raises(InputError, match="schema 'bad-name'"):
        open_memory(with_schema(pg_server, "bad-name"))
    with pytest.raises(InputError, match=r"cannot connect to postgresql://engram:\*\*\*@127\.0\.0\.1:1/db"):
        open_memory("postgresql://engram:secret@127.0.0.1:1/db?connect_timeout=2")
    assert redact("postgresql://u:secret@h/db?schema=x") == "postgresql://u:***@h/db?schema=x"
    with open_memory(with_schema(pg_server, "stored")) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        assert memory.path is not None and memory.url is not None and not Path("postgresql:").exists()


def test_cli_on_a_postgres_memory(
    pg_server: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engram.cli import main
    from test_cli import write_corpus

    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # a directory made from the URL by mistake would appear here
    corpus, extractions, _ = write_corpus(tmp_path)
    url = with_schema(pg_server, f"cli_{uuid.uuid4().hex[:8]}")
    assert main(["retrieve", "Who founded Acme Tools?", "--memory", url, "--embedder", "hash"]) == 1
    assert "no memory at postgresql://" in capsys.readouterr().err
    assert main(["index", str(corpus), "--memory", url, "--extractions", str(extractions), "--embedder", "hash"]) == 0
    assert "5 passages" in capsys.readouterr().err
    assert main(["retrieve", "Who founded Acme Tools?", "--memory", url, "--embedder", "hash", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip())["passages"][0]["id"] == "acme"
    assert main(["stats", "--memory", url, "--embedder", "hash"]) == 0
    assert json.loads(capsys.readouterr().out)["facts"] == 8
    assert not any(tmp_path.glob("postgres*"))


def test_engram_serve_on_a_postgres_memory(pg_server: str) -> None:  # noqa: F811
    from helpers import DOCS as SERVER_DOCS
    from helpers import EXTRACTIONS as SERVER_EXTRACTIONS
    from server_helpers import hash_settings, serve

    url = with_schema(pg_server, f"serve_{uuid.uuid4().hex[:8]}")
    with Memory(url, embedder=HashEmbedder(), llm=False) as memory:
        memory.index(SERVER_DOCS, extractions=SERVER_EXTRACTIONS)
        expected = memory.retrieve("Where was the founder of Acme Tools born?", top_k=3)[0]
    with serve(hash_settings(memory=url)) as server, server.client() as http:
        body = {"query": "Where was the founder of Acme Tools born?", "top_k": 3}
        result = http.post("/v1/memories/default/retrieve", json=body).json()["results"][0]
        assert [p["id"] for p in result["passages"]] == [p.id for p in expected.passages]
        assert http.get("/v1/memories/default").json()["stats"]["documents"] == len(SERVER_DOCS)


def test_a_lost_connection_is_reopened(pg_url: str) -> None:  # noqa: F811
    import psycopg

    with open_memory(pg_url) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        conninfo = pg_url.split("&schema=")[0]
        with psycopg.connect(conninfo, autocommit=True) as admin:  # the other clients of the test's server: ours
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND backend_type = 'client backend' AND datname = current_database()"
            ).fetchall()
        assert ended and all(done for (done,) in ended)
        with pytest.raises(psycopg.OperationalError):
            memory.documents()
        assert set(memory.documents()) == {"a", "b", "c"}
        memory.delete(["a"])
        assert memory.stats()["generation"] == 2
