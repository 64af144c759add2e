"""Two-step OpenIE against the scripted server: parsing, validation, the retry and extract_many."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from engram.errors import LLMConfigError
from engram.extract import ExtractionOutcome, extract_many, extract_passage
from engram.llm.openai_chat import LLMUnreachableError
from fake_openai import FakeOpenAI, InFlight, Spec, error, last_user_text, reply, task_of

PASSAGE = "Ada Lovelace wrote notes on the Analytical Engine designed by Charles Babbage in 1843."
ENTITIES = {"entities": ["Ada Lovelace", "Analytical Engine", "Charles Babbage", "1843"]}
TRIPLES = {
    "triples": [
        ["Ada Lovelace", "wrote notes on", "Analytical Engine"],
        ["Charles Babbage", "designed", "Analytical Engine"],
        ["Ada Lovelace", "wrote notes in", "1843"],
    ]
}


def as_json(value: Any) -> str:
    return json.dumps(value)


def test_well_formed_extraction(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(as_json(ENTITIES), as_json(TRIPLES))
    outcome = extract_passage(fake_llm.chat(), PASSAGE, title="Ada Lovelace")
    expected = [(s, r, o) for s, r, o in TRIPLES["triples"]]
    assert outcome == ExtractionOutcome(ENTITIES["entities"], expected, dropped=0, error=None)
    assert outcome.ok
    ner, triples = fake_llm.requests
    assert task_of(ner) == "ner" and task_of(triples) == "triples"
    assert ner["response_format"] == {"type": "json_object"}
    assert last_user_text(ner).endswith(f"Ada Lovelace\n{PASSAGE}")
    assert PASSAGE in last_user_text(triples)
    assert json.dumps(ENTITIES["entities"]) in last_user_text(triples)


def test_code_fenced_json_in_prose(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        f"Here are the entities:\n```json\n{as_json(ENTITIES)}\n```",
        f"```\n{as_json(TRIPLES)}\n```\nLet me know if you need more.",
    )
    outcome = extract_passage(fake_llm.chat(), PASSAGE)
    assert outcome.ok and len(outcome.triples) == 3 and len(outcome.entities) == 4


def test_garbage_then_retry_succeeds(fake_llm: FakeOpenAI) -> None:
    fake_llm.push("I cannot find any entities, sorry.", as_json(ENTITIES), as_json(TRIPLES))
    outcome = extract_passage(fake_llm.chat(), PASSAGE)
    assert outcome.ok and len(outcome.triples) == 3
    assert fake_llm.attempts == 3
    retry = fake_llm.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "I cannot find any entities, sorry."}
    assert "no JSON object" in retry[-1]["content"]


def test_garbage_twice_is_an_error_outcome(fake_llm: FakeOpenAI) -> None:
    fake_llm.push("garbage", "still garbage")
    outcome = extract_passage(fake_llm.chat(), PASSAGE)
    assert not outcome.ok and outcome.error is not None and "no JSON object" in outcome.error
    assert outcome.entities == [] and outcome.triples == []
    assert fake_llm.attempts == 2  # the triple step never ran


def test_bad_triple_step_twice_is_an_error_outcome(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(as_json(ENTITIES), '{"facts": []}', '{"triples": "none"}')
    outcome = extract_passage(fake_llm.chat(), PASSAGE)
    assert outcome.error is not None and '"triples" list' in outcome.error
    assert fake_llm.attempts == 3


def test_partial_json_is_retried(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(as_json(ENTITIES), '{"triples": [["Ada Lovelace", "wrote', as_json(TRIPLES))
    outcome = extract_passage(fake_llm.chat(), PASSAGE)
    assert outcome.ok and len(outcome.triples) == 3
    assert "cut off" in fake_llm.requests[2]["messages"][-1]["content"]


def test_length_truncation_is_retried_then_fails(fake_llm: FakeOpenAI) -> None:
    cut = reply('{"entities": ["Ada', finish_reason="length")
    fake_llm.push(cut, cut)
    outcome = extract_passage(fake_llm.chat(), PASSAGE)
    assert outcome.error is not None and "length limit" in outcome.error
    assert "shorter" in fake_llm.requests[1]["messages"][-1]["content"]


def test_invalid_triples_are_dropped_and_counted(fake_llm: FakeOpenAI) -> None:
    triples = [
        ["Ada Lovelace", "wrote notes on", "Analytical Engine"],
        ["Ada Lovelace", "wrote"],
        ["a", "b", "c", "d"],
        ["", "designed", "Analytical Engine"],
        ["   ", "designed", "Analytical Engine"],
        ["!!!", "designed", "Analytical Engine"],
        [None, "designed", "Analytical Engine"],
        [True, "is", "x"],
        "Ada Lovelace wrote notes",
        {"subject": "Charles Babbage", "relation": "designed", "object": "Analytical Engine"},
        ["Ada Lovelace", "wrote notes in", 1843],
        ["ada lovelace", "Wrote notes on", "analytical engine!"],  # duplicate after normalisation
    ]
    fake_llm.push(as_json(ENTITIES), as_json({"triples": triples}))
    outcome = extract_passage(fake_llm.chat(), PASSAGE)
    assert outcome.ok
    assert outcome.triples == [
        ("Ada Lovelace", "wrote notes on", "Analytical Engine"),
        ("Charles Babbage", "designed", "Analytical Engine"),
        ("Ada Lovelace", "wrote notes in", "1843"),
    ]
    assert outcome.dropped == 8


def test_entities_are_cleaned(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        as_json({"entities": ["Ada", " ada ", "", 1843, None, ["x"], "Babbage"]}), '{"triples": []}'
    )
    outcome = extract_passage(fake_llm.chat(), PASSAGE)
    assert outcome.entities == ["Ada", "1843", "Babbage"]


def test_valid_json_without_triples_is_an_empty_success(fake_llm: FakeOpenAI) -> None:
    fake_llm.push('{"entities": []}', '{"triples": []}')
    outcome = extract_passage(fake_llm.chat(), "Nothing to see here.")
    assert outcome == ExtractionOutcome(entities=[], triples=[], dropped=0, error=None)


def test_failed_llm_call_is_an_error_outcome(fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: error(500, "boom")
    outcome = extract_passage(fake_llm.chat(max_retries=1), PASSAGE)
    assert outcome.error is not None and outcome.error.startswith("LLM call failed")


def test_config_error_propagates(fake_llm: FakeOpenAI) -> None:
    with pytest.raises(LLMConfigError):
        extract_passage(fake_llm.chat(model="unknown"), PASSAGE)


# --- extract_many --------------------------------------------------------------------------------------


def scripted_openie(delay: float = 0.0) -> tuple[Any, InFlight]:
    """A handler answering each passage "P<n> ..." with entity "P<n>"; passage "BAD" gets garbage."""
    in_flight = InFlight()

    def handler(request: dict[str, Any]) -> Spec:
        with in_flight:
            time.sleep(delay)
        text = last_user_text(request)
        if "BAD" in json.dumps(request["messages"]):  # also on the retry, whose last message is a complaint
            return reply("not json")
        name = text.split("Passage:\n", 1)[1].split()[0]
        if task_of(request) == "ner":
            return reply(as_json({"entities": [name]}))
        return reply(as_json({"triples": [[name, "is", "a passage"]]}))

    return handler, in_flight


def test_extract_many_runs_concurrently_and_reports_in_calling_thread(fake_llm: FakeOpenAI) -> None:
    handler, state = scripted_openie(delay=0.15)
    fake_llm.handler = handler
    passages = [(f"id{n}", f"P{n} is some passage.", None) for n in range(6)] + [("bad", "BAD text", None)]
    seen: list[tuple[str, ExtractionOutcome, int]] = []
    outcomes = extract_many(
        fake_llm.chat(),
        passages,
        max_workers=4,
        on_result=lambda pid, o: seen.append((pid, o, threading.get_ident())),
    )
    assert sorted(pid for pid, _, _ in seen) == sorted(pid for pid, _, _ in passages)
    assert {ident for _, _, ident in seen} == {threading.get_ident()}
    assert state.peak >= 2
    for n in range(6):
        assert outcomes[f"id{n}"].triples == [(f"P{n}", "is", "a passage")]
    assert outcomes["bad"].error is not None
    assert fake_llm.attempts == 6 * 2 + 2


def test_extract_many_aborts_on_config_error(fake_llm: FakeOpenAI) -> None:
    chat = fake_llm.chat(model="unknown")
    results: list[str] = []
    passages = [(f"id{n}", f"P{n} text", None) for n in range(20)]
    with pytest.raises(LLMConfigError):
        extract_many(chat, passages, max_workers=2, on_result=lambda pid, o: results.append(pid))
    assert results == []
    assert fake_llm.attempts < 20  # the queued passages were cancelled


def test_extract_many_aborts_when_the_server_is_unreachable() -> None:
    from engram.llm import OpenAIChat

    chat = OpenAIChat("m", base_url="http://127.0.0.1:9/v1", max_retries=0)
    with chat, pytest.raises(LLMUnreachableError):
        extract_many(chat, [("a", "text", None), ("b", "text", None)], max_workers=1)


def test_extract_many_propagates_callback_errors(fake_llm: FakeOpenAI) -> None:
    handler, _ = scripted_openie()
    fake_llm.handler = handler

    def explode(pid: str, outcome: ExtractionOutcome) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        extract_many(fake_llm.chat(), [("a", "P1 text", None), ("b", "P2 text", None)], on_result=explode)


def test_extract_many_with_nothing_to_do(fake_llm: FakeOpenAI) -> None:
    assert extract_many(fake_llm.chat(), []) == {}
    assert fake_llm.attempts == 0
