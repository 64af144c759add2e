"""The `lightrag` peer method end to end through the scripted OpenAI-compatible server (extraction with one
gleaning request, query keywords), added to an existing memory, kept in step by index and delete, re-opened;
and its merge and ranking steps on hand-made inputs."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.errors import InputError
from engram.retrieve.peers.chunk_merge import ChunkGraph, RawEntity, RawRelation, merge
from engram.retrieve.peers.lightrag.prompts import EXTRACT_SYSTEM, GLEAN_REQUEST, KEYWORDS_SYSTEM
from engram.retrieve.peers.lightrag.query import rank_chunks, round_robin
from fake_openai import FakeOpenAI, last_user_text, reply
from helpers import DOCS, EXTRACTIONS

EXTRA = [{"id": "bergen", "entities": ["Bergen", "Norway"], "triples": [["Bergen", "city in", "Norway"]]}]
BERGEN = Document("bergen", "Bergen is a city in Norway.")
BY_TEXT = {d.text: e for d, e in zip([*DOCS, BERGEN], [*EXTRACTIONS, *EXTRA])}


def graph_reply(extraction: dict[str, Any]) -> str:
    entities = [
        {"name": n, "type": "other", "description": f"named in {extraction['id']}"} for n in extraction["entities"]
    ]
    relations = [
        {"source": s, "target": o, "keywords": [r], "description": f"{s} {r} {o}", "strength": 5}
        for s, r, o in extraction["triples"]
    ]
    return json.dumps({"entities": entities, "relations": relations})


def handler(broken: str = "") -> Any:
    def handle(request: dict[str, Any]) -> Any:
        messages = request["messages"]
        system, user = messages[0]["content"], last_user_text(request)
        if system == EXTRACT_SYSTEM and user == GLEAN_REQUEST:
            return reply(json.dumps({"entities": [], "relations": []}))
        if system == EXTRACT_SYSTEM:
            found = [e for text, e in BY_TEXT.items() if text in user]
            return reply("no idea" if not found or found[0]["id"] == broken else graph_reply(found[0]))
        if system == KEYWORDS_SYSTEM and "Norway" in user:
            return reply(json.dumps({"high_level_keywords": ["capital of"], "low_level_keywords": ["Norway"]}))
        if system == KEYWORDS_SYSTEM:
            return reply(json.dumps({"high_level_keywords": ["founded by"], "low_level_keywords": ["Alice Moreau"]}))
        return None

    return handle


def open_memory(path: Path, fake: FakeOpenAI) -> Memory:
    return Memory(path, embedder=HashEmbedder(), llm=fake.chat())


def test_lightrag_added_to_a_memory_kept_in_step_and_reopened(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)  # imported: no LLM call
        assert fake_llm.attempts == 0
        done = memory.add_method("lightrag")
        assert (done.extracted, done.failed) == (5, 0)
        assert fake_llm.attempts == 10  # one extraction and one gleaning request per chunk
        assert done.stats["entities"] == 10 and done.stats["relations"] == 8
        found = memory.retrieve("What is the capital of Norway?", top_k=3, method="lightrag")[0]
        assert found.method == "lightrag" and found.passages[0].id == "oslo"
        assert ("Oslo", "capital of", "Norway") in [f.triple for f in found.facts]
        alice = memory.retrieve("Who founded Acme Tools?", top_k=2, method="lightrag")[0]
        assert alice.passages[0].id in {"acme", "alice"}
        costs = memory.method_costs("lightrag")
        assert costs["phases"]["index"]["calls"] == 10 and costs["phases"]["query"]["calls"] == 2
        assert costs["phases"]["index"]["prompt_tokens"] > 0 and costs["disk_bytes"] > 0

        report = memory.index([BERGEN], extractions=EXTRA)
        assert report.stats["lightrag_extracted"] == 1 and fake_llm.attempts == 14
        memory.delete(["oslo"])
        stats = memory.method_costs("lightrag")["index"]
        assert (stats["chunks"], stats["entities"], stats["relations"]) == (5, 11, 8)  # Bergen in, Oslo-Norway out
        after = memory.retrieve("What is the capital of Norway?", top_k=6, method="lightrag")[0]
        assert "oslo" not in [p.id for p in after.passages] and after.passages[0].id == "bergen"
        assert ("Oslo", "capital of", "Norway") not in [f.triple for f in after.facts]
    calls = fake_llm.attempts
    with open_memory(tmp_path / "m", fake_llm) as memory:
        again = memory.retrieve("What is the capital of Norway?", top_k=6, method="lightrag")[0]
        assert [p.id for p in again.passages] == [p.id for p in after.passages]
        assert memory.method_costs("lightrag")["index"]["entities"] == 11
    assert fake_llm.attempts == calls  # the keywords reply comes from the response cache


def test_failed_chunks_are_retried_by_the_next_write(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler(broken="lyon")
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        done = memory.add_method("lightrag")
        assert (done.extracted, done.failed) == (4, 1)
        fake_llm.handler = handler()
        again = memory.add_method("lightrag")  # resumes: only the failed chunk is sent
        assert (again.extracted, again.failed) == (1, 0) and again.stats["entities"] == 10


def test_writes_without_an_llm_leave_new_chunks_pending(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS[:4], extractions=EXTRACTIONS)
        memory.add_method("lightrag")
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        report = memory.index([DOCS[4]], extractions=EXTRACTIONS)  # committed; lightrag follows later
        assert report.stats["lightrag_extracted"] == 0 and report.stats["lightrag_pending"] == 1
        memory.delete(["bob"])  # deletions are followed without an LLM
        assert memory.method_costs("lightrag")["index"]["chunks"] == 3
    with open_memory(tmp_path / "m", fake_llm) as memory:
        done = memory.add_method("lightrag")
        assert done.extracted == 1 and done.stats["chunks"] == 4 and done.stats["pending"] == 0
        assert memory.retrieve("capital of Norway", top_k=1, method="lightrag")[0].passages[0].id == "oslo"


def test_retrieving_without_the_index_names_the_fix(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        with pytest.raises(InputError, match="add_method"):
            memory.retrieve("capital of Norway", method="lightrag")


def test_estimate_counts_requests_and_the_cache(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        before = memory.estimate_method("lightrag")
        assert (before.passages, before.calls, before.cached_calls) == (5, 10, 0) and before.input_tokens > 0
        memory.add_method("lightrag")
        after = memory.estimate_method("lightrag")
        assert (after.calls, after.cached_calls, after.input_tokens) == (0, 10, 0)


def test_merge_on_hand_made_chunks() -> None:
    one = ChunkGraph(
        (RawEntity("Acme Tools", "organization", "A toolmaker."), RawEntity("Alice", "person", "A founder.")),
        (RawRelation("Alice", "Acme Tools", ("founding",), "Alice founded Acme.", 7.0),),
    )
    two = ChunkGraph(
        (RawEntity("ACME tools", "product", "Sells tools."), RawEntity("acme tools", "organization", "A toolmaker.")),
        (
            RawRelation("acme tools", "alice", ("Founding", "ownership"), "Alice owns Acme.", 2.0),
            RawRelation("Alice", "Lyon", (), "", 1.0),
            RawRelation("Alice", "alice", ("self",), "", 1.0),
        ),
    )
    entities, relations = merge({"c2": two, "c1": one})
    assert [(e.key, e.name, e.type, e.description, e.sources) for e in entities] == [
        ("acme tools", "Acme Tools", "organization", "A toolmaker.\nSells tools.", ("c1", "c2")),
        ("alice", "Alice", "person", "A founder.", ("c1", "c2")),
        ("lyon", "Lyon", "unknown", "", ("c2",)),
    ]
    assert [(r.source, r.target, r.keywords, r.description, r.strength, r.sources) for r in relations] == [
        ("alice", "acme tools", ("founding", "ownership"), "Alice founded Acme.\nAlice owns Acme.", 9.0, ("c1", "c2")),
        ("alice", "lyon", (), "", 1.0, ("c2",)),
    ]


def test_chunk_ranking_and_hybrid_interleaving() -> None:
    ranked = rank_chunks([(0.9, ["a"]), (0.9, ["b"]), (0.5, ["b", "c"]), (0.4, ["d", "c"])])
    # a and b tie on their best score, b is cited by more hits; c and d by their best score
    assert ranked == [("b", 0.9), ("a", 0.9), ("c", 0.5), ("d", 0.4)]
    assert round_robin([[("a", 1.0), ("b", 0.8)], [("c", 0.7), ("a", 0.6), ("d", 0.5)]]) == [
        ("a", 1.0),
        ("c", 0.7),
        ("b", 0.8),
        ("d", 0.5),
    ]


def test_peer_tables_are_versioned(tmp_path: Path) -> None:
    from engram.errors import MemoryFormatError
    from engram.store.peer_tables import PeerTables

    tables = PeerTables(tmp_path / "records.sqlite")
    assert tables.methods() == {} and tables.costs("demo") == {}  # nothing created until a method is added
    schema = "CREATE TABLE IF NOT EXISTS demo_rows (x INTEGER)"
    assert tables.ensure("demo", 1, schema) is True
    with tables.transaction() as db:
        db.execute("INSERT INTO demo_rows VALUES (1)")
    tables.add_cost("demo", "index", {"runs": 1, "calls": 2, "seconds": 0.5})
    assert tables.ensure("demo", 1, schema) is False and tables.read("SELECT COUNT(*) FROM demo_rows")[0][0] == 1
    assert tables.costs("demo")["index"]["calls"] == 2
    assert tables.ensure("demo", 2, schema + " ; CREATE TABLE IF NOT EXISTS demo_more (y TEXT)") is True
    assert tables.read("SELECT COUNT(*) FROM demo_rows")[0][0] == 0 and tables.costs("demo") == {}
    assert tables.methods() == {"demo": 2}
    with pytest.raises(MemoryFormatError, match="upgrade engram"):
        tables.ensure("demo", 1, schema)
    tables.close()


def merged_rows(memory: Memory) -> tuple[list[Any], list[Any]]:
    tables = memory.context().tables
    assert tables is not None
    entities = tables.read("SELECT key, name, type, description, sources, text_hash, vector FROM lightrag_entities")
    relations = tables.read("SELECT * FROM lightrag_relations")
    return sorted(entities), sorted(relations)


def full_merge(memory: Memory) -> tuple[list[Any], list[Any]]:
    tables = memory.context().tables
    assert tables is not None
    with tables.transaction() as db:
        db.execute("DELETE FROM lightrag_state")  # not merged from anything known: the next sync merges all
    memory.add_method("lightrag")
    return merged_rows(memory)


def test_incremental_updates_equal_a_full_merge(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram.ingest.prepare import passage_hash
    from engram.retrieve.peers.lightrag import index as lightrag_index

    full: list[int] = []
    merge_all = lightrag_index.remerge

    def counted(*args: Any) -> None:
        full.append(1)
        merge_all(*args)

    monkeypatch.setattr(lightrag_index, "remerge", counted)
    # a chunk spelling Oslo "OSLO" whose content sorts before the other chunks naming Oslo renames the entity
    first = min(passage_hash(d.title, d.text) for d in DOCS if d.id in ("bob", "oslo"))
    texts = (f"OSLO hosts meeting number {i}." for i in range(500))
    text = next(t for t in texts if passage_hash(None, t) < first)
    extraction = {"id": "variant", "entities": ["OSLO", "Bob Stein"], "triples": [["Bob Stein", "visits", "OSLO"]]}
    monkeypatch.setitem(BY_TEXT, text, extraction)
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        memory.add_method("lightrag")
        steps: list[Callable[[], object]] = [
            lambda: memory.index([Document("variant", text)], extractions=[extraction]),
            lambda: memory.index([BERGEN], extractions=EXTRA),
            lambda: memory.delete(["oslo"]),
            lambda: memory.delete(["variant", "acme"]),
        ]
        names = []
        for step in steps:
            merges = len(full)
            step()
            incremental = merged_rows(memory)
            assert len(full) == merges  # the write updated the touched rows only
            names.append({row[0]: row[1] for row in incremental[0]}["oslo"])
            assert incremental == full_merge(memory)
        assert names == ["OSLO", "OSLO", "OSLO", "Oslo"]  # renamed by the variant, back when it is deleted


def test_local_and_global_modes_share_the_index_and_make_up_hybrid(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        done = memory.add_method("lightrag-local")  # the mode's name adds LightRAG's one index
        assert done.method == "lightrag" and memory.method_costs("lightrag")["index"]["chunks"] == 5
        report = memory.index([BERGEN], extractions=EXTRA)
        assert report.stats["lightrag_extracted"] == 1 and "lightrag-local_extracted" not in report.stats
        question = "What is the capital of Norway?"
        found = {m: memory.retrieve(question, top_k=6, method=m)[0] for m in ("lightrag-local", "lightrag-global")}
        hybrid = memory.retrieve(question, top_k=6, method="lightrag")[0]
    assert [r.method for r in found.values()] == ["lightrag-local", "lightrag-global"]
    local, overall = ([p.id for p in r.passages] for r in found.values())
    assert local and overall and local != overall
    interleaved = list(dict.fromkeys(x for pair in itertools.zip_longest(local, overall) for x in pair if x))
    assert [p.id for p in hybrid.passages] == interleaved[:6]
