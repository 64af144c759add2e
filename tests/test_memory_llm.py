"""End to end through the scripted OpenAI-compatible server: OpenIE at index time, retries of failed passages,
pending passages completed later, the recognition filter and the reader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram import Document, Memory
from engram.embed import HashEmbedder
from fake_openai import FakeOpenAI, last_user_text, reply, task_of
from helpers import DOCS, EXTRACTIONS

BY_ID = {e["id"]: e for e in EXTRACTIONS}


def passage_of(request: dict[str, Any]) -> str | None:
    text = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
    for doc in DOCS:
        if doc.text in text:
            return doc.id
    return None


def openie_handler(broken: set[str] | None = None, keep: Callable[[str], str] | None = None) -> Any:
    """Answers NER and triples from the hand-written extractions; garbage for passages in `broken`."""

    def handle(request: dict[str, Any]) -> Any:
        task, doc_id = task_of(request), passage_of(request)
        if task in ("ner", "triples") and doc_id in (broken or set()):
            return reply("I cannot help with that.")
        if task == "ner":
            return reply(json.dumps({"entities": BY_ID[doc_id]["entities"] if doc_id else []}))
        if task == "triples":
            return reply(json.dumps({"triples": BY_ID[doc_id]["triples"] if doc_id else []}))
        if task == "filter":
            return reply((keep or keep_founder)(last_user_text(request)))
        if task == "reader":
            return reply("The founder was born in Lyon.\nAnswer: Lyon.")
        return None

    return handle


def test_index_extracts_with_the_llm_and_reruns_make_no_calls(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = openie_handler()
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        report = memory.index(DOCS)
        assert (report.extracted, report.failed, report.pending) == (5, 0, 0)
        assert memory.stats()["facts"] == 8
    assert fake_llm.attempts == 10  # NER + triples per passage
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        memory.index([*DOCS, Document("new", "Lyon hosts a festival of lights.")])
    # only the new passage is sent: two calls, none for the five finished passages
    assert fake_llm.attempts == 12
    assert {passage_of(r) for r in fake_llm.requests[10:]} == {None}


def test_failed_passages_are_recorded_and_retried(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = openie_handler(broken={"oslo"})
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        report = memory.index(DOCS)
        assert (report.extracted, report.failed) == (4, 1)
        assert memory.stats()["failed"] == 1
        assert memory.retrieve("capital of Norway", method="dense")[0].passages[0].id == "oslo"
        before = fake_llm.attempts
        fake_llm.handler = openie_handler()
        report = memory.extract()
        assert (report.extracted, report.failed) == (1, 0)
        assert {passage_of(r) for r in fake_llm.requests[before:]} == {"oslo"}
        assert memory.stats()["failed"] == 0 and memory.stats()["facts"] == 8


def test_pending_passages_are_completed_by_extract(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        assert memory.index(DOCS).pending == 5
    fake_llm.handler = openie_handler()
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        report = memory.extract()
        assert report.extracted == 5 and report.pending == 0
        assert memory.retrieve("Who founded Acme Tools?")[0].method == "hipporag2"


def keep_founder(prompt: str) -> str:
    return json.dumps({"facts": [["Acme Tools", "founded by", "Alice Moreau"], ["Acme Tools", "sold to", "Nobody"]]})


def test_recognition_filter_keeps_only_candidates(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = openie_handler(keep=keep_founder)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        r = memory.retrieve("Who founded Acme Tools?")[0]
    assert r.filtered and r.method == "hipporag2"
    assert [f.triple for f in r.facts] == [("acme tools", "founded by", "alice moreau")]  # the invented one is gone
    assert {f.triple for f in r.facts} <= {f.triple for f in r.candidate_facts}
    assert {s.phrase for s in r.seeds} == {"acme tools", "alice moreau"}


def test_filter_that_keeps_nothing_falls_back_to_dense(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = openie_handler(keep=lambda prompt: '{"facts": []}')
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        r = memory.retrieve("Who founded Acme Tools?", method="hipporag2-paper")[0]
        dense = memory.retrieve("Who founded Acme Tools?", method="dense")[0]
        default = memory.retrieve("Who founded Acme Tools?")[0]
        unnamed = memory.retrieve("Who founded it?")[0]
    assert r.method == "dense" and r.filtered and r.facts == [] and r.seeds == []
    assert [p.id for p in r.passages] == [p.id for p in dense.passages]
    # the default still seeds the phrase the query names; with no name and no kept fact it ranks by its
    # passage scores (dense + BM25)
    assert default.method == "hipporag2" and default.filtered and default.facts == []
    assert [s.phrase for s in default.seeds] == ["acme tools"]
    assert unnamed.method == "hybrid" and unnamed.filtered and unnamed.seeds == []
    assert unnamed.fallback_reason == "no fact survived the recognition filter"


def test_answer_reads_the_top_passages(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = openie_handler(keep=keep_founder)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        answer = memory.answer("Where was the founder of Acme Tools born?")[0]
    assert answer.answer == "Lyon"
    assert len(answer.passages) == 5 and answer.facts
    reader = [r for r in fake_llm.requests if task_of(r) == "reader"][-1]
    assert all(p.text in last_user_text(reader) for p in answer.passages)
