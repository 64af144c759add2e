"""An LLM that never answers (issue 10, defect 9) and query-time calls (defect 11): indexing stops with a clear
error after a few silent attempts, keeping finished work; retrieval falls back to the unfiltered facts within a
bounded time and says why; query-time calls are cached, counted and run concurrently."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engram import Memory
from engram.embed import HashEmbedder
from engram.llm.failures import LLMUnreachableError
from fake_openai import FakeOpenAI, InFlight, Spec, hang, openie_answer, passage_of, reply, task_of
from helpers import DOCS, EXTRACTIONS

QUESTIONS = [
    "Where was the founder of Acme Tools born?",
    "Who founded Zenith Foods?",
    "Which river flows through Lyon?",
    "What is the capital of Norway?",
    "When was Acme Tools founded?",
    "Where was Bob Stein born?",
]


def test_indexing_stops_when_the_llm_never_answers_and_keeps_finished_work(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    answered = {"Acme Tools", "Alice Moreau"}  # titles of the passages the server still answers

    def handle(request: dict[str, Any]) -> Spec | str | None:
        answer = openie_answer(request)
        if answer is not None and passage_of(request).split("\n", 1)[0] in answered:
            return reply(answer)
        return hang(30)

    fake_llm.handler = handle
    chat = fake_llm.chat(timeout=0.3, max_retries=4, give_up_after=3)
    start = time.monotonic()
    with (
        Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat) as memory,
        pytest.raises(LLMUnreachableError, match="did not answer 9 requests in a row"),
    ):
        memory.index(DOCS)
    # the server still lists its models, so timeouts count as slow replies until 3 x give_up_after in a row
    # (then it is stuck), not every passage's every retry
    assert time.monotonic() - start < 10
    first_run = fake_llm.attempts
    fake_llm.handler = lambda request: openie_answer(request)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        report = memory.index(DOCS)
    assert report.failed == 0 and report.documents == len(DOCS)
    again = {passage_of(r).split("\n", 1)[0] for r in fake_llm.requests[first_run:]}
    assert again and not again & answered  # the two finished passages were not extracted again


def test_passages_that_time_out_fail_alone_while_the_server_answers(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    """A small model that loops on a few passages times out on them; the server still answers, so those
    passages fail (to be retried by the next run) and the rest are extracted: the run is not taken as down."""
    slow = {"Acme Tools", "Zenith Foods"}  # titles

    def handle(request: dict[str, Any]) -> Spec | str | None:
        if passage_of(request).split("\n", 1)[0] in slow:
            return hang(30)
        return openie_answer(request)

    fake_llm.handler = handle
    chat = fake_llm.chat(timeout=0.3, max_retries=1, give_up_after=1, max_concurrency=1)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat) as memory:
        report = memory.index(DOCS)
    assert report.failed == len(slow)
    assert report.extracted == len(DOCS) - len(slow)


def filter_memory(tmp_path: Path, chat: Any) -> Memory:
    memory = Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat)
    memory.index(DOCS, extractions=EXTRACTIONS)
    return memory


def test_retrieval_falls_back_to_unfiltered_facts_within_a_bounded_time(
    tmp_path: Path, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.handler = lambda request: hang(30)
    chat = fake_llm.chat(timeout=20, max_retries=4, query_timeout=0.3, give_up_after=3)
    with filter_memory(tmp_path, chat) as memory, caplog.at_level(logging.WARNING):
        start = time.monotonic()
        results = memory.retrieve(QUESTIONS)
        elapsed = time.monotonic() - start
    assert elapsed < 5
    assert len(results) == len(QUESTIONS)
    for r in results:
        assert not r.filtered and r.passages
        assert "recognition filter did not run" in r.fallback_reason
    assert "recognition filter did not run" in caplog.text


def concurrent_handler(in_flight: InFlight) -> Any:
    lock = threading.Lock()

    def handle(request: dict[str, Any]) -> Spec | str | None:
        with in_flight:
            time.sleep(0.2)
        with lock:
            if task_of(request) == "filter":
                return reply(json.dumps({"facts": [1]}))
            if task_of(request) == "reader":
                return reply("Reasoning.\nAnswer: Lyon")
        return None

    return handle


def test_query_time_calls_of_a_batch_run_concurrently(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    filters, readers = InFlight(), InFlight()
    fake_llm.handler = concurrent_handler(filters)
    with filter_memory(tmp_path, fake_llm.chat(max_concurrency=4)) as memory:
        results = memory.retrieve(QUESTIONS)
        assert all(r.filtered for r in results)
        assert filters.peak > 1
        fake_llm.handler = concurrent_handler(readers)
        answers = memory.answer([q + " (reader)" for q in QUESTIONS])
        assert [a.answer for a in answers] == ["Lyon"] * len(QUESTIONS)
        assert readers.peak > 1


def test_repeated_query_time_calls_come_from_the_cache_and_are_counted(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.handler = concurrent_handler(InFlight())
    with filter_memory(tmp_path, fake_llm.chat()) as memory:
        memory.answer(QUESTIONS[:2])
        sent = fake_llm.attempts
        assert sent == 4  # a filter and a reader call per question
        memory.answer(QUESTIONS[:2])
        memory.retrieve(QUESTIONS[:2])
        assert fake_llm.attempts == sent
        total = memory.stats()["llm"]["total"]
    assert total["calls"] == 4 and total["cache_hits"] == 6


def test_an_extract_stopped_by_a_silent_llm_keeps_what_it_finished_in_the_graph(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The passages `engram extract` finished before the LLM went silent join the graph at once (they used to
    stay stored but unlinked, and no later run linked them)."""
    answered = {"Acme Tools", "Alice Moreau"}

    def handle(request: dict[str, Any]) -> Spec | str | None:
        answer = openie_answer(request)
        if answer is not None and passage_of(request).split("\n", 1)[0] in answered:
            return reply(answer)
        return hang(30)

    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        memory.index(DOCS)
    fake_llm.handler = handle
    chat = fake_llm.chat(timeout=0.3, max_retries=4, give_up_after=3)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat) as memory:
        with pytest.raises(LLMUnreachableError):
            memory.extract()
        assert memory.stats()["pending"] == len(DOCS) - len(answered)
        assert memory.phrases_of("acme")  # linked now, not at some later run
    fake_llm.handler = lambda request: openie_answer(request)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        memory.extract()
        resumed = memory.stats()
    with Memory(tmp_path / "fresh", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        memory.index(DOCS)
        fresh = memory.stats()
    assert resumed["pending"] == 0
    keys = ("facts", "phrases", "edges")
    assert {k: resumed[k] for k in keys} == {k: fresh[k] for k in keys}
