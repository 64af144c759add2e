"""IRCoT against the scripted OpenAI-compatible server: stop conditions and the merging of step retrievals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engram import Memory
from engram.embed import HashEmbedder
from engram.errors import LLMError
from engram.retrieve.ircot import IRCOT_SYSTEM, ircot, merge_steps, parse_step
from engram.types import RetrievedPassage
from fake_openai import FakeOpenAI, last_user_text
from helpers import DOCS, EXTRACTIONS

QUESTION = "Where was the founder of Acme Tools born?"
THOUGHT = "The founder of Acme Tools is Alice Moreau."


def build(path: Path, llm: Any = None) -> Memory:
    memory = Memory(path, embedder=HashEmbedder(), llm=llm)
    memory.index(DOCS, extractions=EXTRACTIONS)
    return memory


def is_ircot(request: dict[str, Any]) -> bool:
    return bool(request["messages"][0]["content"] == IRCOT_SYSTEM)


def p(pid: str) -> RetrievedPassage:
    return RetrievedPassage(pid, pid, None, f"text {pid}", 0.0)


def test_merge_steps_by_best_rank() -> None:
    merged = merge_steps([[p("a"), p("b"), p("c")], [p("d"), p("a"), p("e")]], 4)
    assert [x.id for x in merged] == ["a", "d", "b", "c"]  # rank 1s (step order), then rank 2s, ...
    assert [x.score for x in merged] == [1.0, 1.0, 0.5, 1 / 3]
    assert [x.id for x in merge_steps([[p("a")], [p("a")]], 5)] == ["a"]  # each passage once


def test_parse_step() -> None:
    assert parse_step("Alice founded Acme.\nShe was born in Lyon.") == (None, "Alice founded Acme.")
    assert parse_step("So the answer is: **Lyon**.") == ("Lyon", "")
    assert parse_step("Answer: Lyon") == ("Lyon", "")
    assert parse_step("   \n") == (None, "")


def test_stops_when_the_reader_answers(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(THOUGHT, "Answer: Lyon")
    with build(tmp_path / "m", fake_llm.chat()) as memory:
        result = ircot(memory.context(), [QUESTION], top_k=2, method="dense", steps=4)[0]
    assert result.answer == "Lyon" and result.thoughts == [THOUGHT]
    assert result.queries == [QUESTION, THOUGHT] and result.steps == 2
    assert fake_llm.attempts == 2 and all(is_ircot(r) for r in fake_llm.requests)
    # the second reader call saw the first thought and the passages of both steps
    second = last_user_text(fake_llm.requests[1])
    assert f"Reasoning so far: {THOUGHT}" in second and "Alice Moreau was born" in second
    assert result.retrieval.method == "ircot-dense"


def test_stops_after_n_steps_and_merges(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    other = "Oslo is the capital of Norway."
    fake_llm.push(other, THOUGHT, "never asked")
    with build(tmp_path / "m", fake_llm.chat()) as memory:
        result = ircot(memory.context(), [QUESTION], top_k=2, method="dense", steps=2)[0]
        step1 = memory.retrieve(QUESTION, top_k=2, method="dense")[0]
        step2 = memory.retrieve(other, top_k=2, method="dense")[0]
    assert result.answer is None and result.steps == 2 and fake_llm.attempts == 2
    assert len(result.thoughts) == 2
    expected = [x.id for x in merge_steps([step1.passages, step2.passages], 2)]
    assert [x.id for x in result.retrieval.passages] == expected
    assert {step1.passages[0].id, step2.passages[0].id} == set(expected)


def test_stops_when_the_reader_repeats_itself(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: THOUGHT if is_ircot(request) else '{"facts": [1, 2]}'  # filter: keep two
    with build(tmp_path / "m", fake_llm.chat()) as memory:
        result = ircot(memory.context(), [QUESTION], top_k=3, method="hipporag2", steps=5)[0]
    assert result.steps == 2 and result.answer is None
    assert sum(1 for r in fake_llm.requests if is_ircot(r)) == 2  # the second, repeated thought ends it
    assert result.retrieval.facts and result.retrieval.seeds and result.retrieval.filtered  # evidence carried


def test_batches_questions_and_works_over_hipporag1(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    def handler(request: dict[str, Any]) -> str:
        text = last_user_text(request)
        if not is_ircot(request):  # query NER for the thought (not in the entities mapping)
            return '{"entities": ["Alice Moreau"]}'
        if "Zenith" in text.split("Question:")[-1]:
            return "Answer: Bob Stein"
        return "Answer: Lyon" if f"Reasoning so far: {THOUGHT}" in text else THOUGHT

    fake_llm.handler = handler
    entities = {QUESTION: ["Acme Tools"], "Who founded Zenith Foods?": ["Zenith Foods"]}
    with build(tmp_path / "m", fake_llm.chat()) as memory:
        first, second = ircot(
            memory.context(), [QUESTION, "Who founded Zenith Foods?"], 3, "hipporag1", 3, query_entities=entities
        )
    assert (first.answer, first.steps) == ("Lyon", 2)
    assert (second.answer, second.steps) == ("Bob Stein", 1)
    assert first.retrieval.method == "ircot-hipporag1"


def test_needs_an_llm_and_a_step(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    with build(tmp_path / "m") as memory:
        with pytest.raises(LLMError):
            ircot(memory.context(), [QUESTION])
        with pytest.raises(Exception, match="at least one step"):
            ircot(memory.context(), [QUESTION], steps=0, llm=fake_llm.chat())
