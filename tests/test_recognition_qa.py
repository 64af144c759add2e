"""The recognition-memory filter and the QA reader, against the scripted server."""

from __future__ import annotations

import json

import pytest

from engram.errors import LLMConfigError
from engram.qa import build_reader_messages, extract_answer, read
from engram.retrieve.recognition import recognition_filter
from engram.types import RetrievedPassage, Triple
from fake_openai import FakeOpenAI, error, last_user_text, reply, task_of

CANDIDATES: list[Triple] = [
    ("Ada Lovelace", "wrote notes on", "Analytical Engine"),
    ("Charles Babbage", "designed", "Analytical Engine"),
    ("Analytical Engine", "was never", "completed"),
    ("Ada Lovelace", "was born in", "London"),
]
QUESTION = "Who designed the machine Ada Lovelace wrote notes on?"


def facts(*triples: object) -> str:
    return json.dumps({"facts": list(triples)})


# --- recognition filter --------------------------------------------------------------------------------


def test_filter_keeps_named_candidates_in_candidate_order(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        facts(
            ["Charles Babbage", "designed", "Analytical Engine"],
            ["ada lovelace", "Wrote notes on", "analytical engine."],  # same after normalize_phrase
        )
    )
    assert recognition_filter(fake_llm.chat(), QUESTION, CANDIDATES) == [0, 1]
    request = fake_llm.requests[0]
    assert task_of(request) == "filter" and request["response_format"] == {"type": "json_object"}
    prompt = last_user_text(request)
    assert QUESTION in prompt
    assert '1. ["Ada Lovelace", "wrote notes on", "Analytical Engine"]' in prompt
    assert '4. ["Ada Lovelace", "was born in", "London"]' in prompt


def test_filter_discards_invented_facts(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        facts(
            ["Charles Babbage", "designed", "Difference Engine"],  # close to a candidate, but not one
            ["Charles Babbage", "invented", "Analytical Engine"],
            ["Ada Lovelace", "was born in", "London", "1815"],
            ["Ada Lovelace", "was born in", "London"],
            "Charles Babbage designed Analytical Engine",
        )
    )
    assert recognition_filter(fake_llm.chat(), QUESTION, CANDIDATES) == [3]


def test_filter_accepts_candidate_numbers(fake_llm: FakeOpenAI) -> None:
    fake_llm.push('{"facts": [2, 1, 2, 9, 0, -1, true]}')
    assert recognition_filter(fake_llm.chat(), QUESTION, CANDIDATES) == [0, 1]


def test_filter_keeping_nothing_is_an_empty_list(fake_llm: FakeOpenAI) -> None:
    fake_llm.push('{"facts": []}')
    assert recognition_filter(fake_llm.chat(), QUESTION, CANDIDATES) == []


def test_filter_keeps_every_duplicate_of_a_named_fact(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(facts(["Ada Lovelace", "was born in", "London"]))
    candidates = [*CANDIDATES, ("ada lovelace", "was born in", "london")]
    assert recognition_filter(fake_llm.chat(), QUESTION, candidates) == [3, 4]


def test_filter_without_candidates_asks_nothing(fake_llm: FakeOpenAI) -> None:
    assert recognition_filter(fake_llm.chat(), QUESTION, []) == []
    assert fake_llm.attempts == 0


def test_filter_retries_a_malformed_reply(fake_llm: FakeOpenAI) -> None:
    fake_llm.push("The relevant facts are 1 and 2.", facts(list(CANDIDATES[1])))
    assert recognition_filter(fake_llm.chat(), QUESTION, CANDIDATES) == [1]
    assert fake_llm.attempts == 2
    assert "could not be used" in fake_llm.requests[1]["messages"][-1]["content"]


def test_filter_unavailable_after_two_bad_replies(fake_llm: FakeOpenAI) -> None:
    fake_llm.push('{"kept": [1]}', reply('{"facts": [["Ada', finish_reason="length"))
    assert recognition_filter(fake_llm.chat(), QUESTION, CANDIDATES) is None
    assert fake_llm.attempts == 2


def test_filter_propagates_llm_errors(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(error(401, "bad key"))
    with pytest.raises(LLMConfigError):
        recognition_filter(fake_llm.chat(), QUESTION, CANDIDATES)


# --- QA reader -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "answer"),
    [
        ("Babbage designed it.\nAnswer: Charles Babbage", "Charles Babbage"),
        ("Reasoning...\nAnswer: Charles Babbage.", "Charles Babbage"),
        ("**Answer:** Charles Babbage", "Charles Babbage"),
        ("**Answer**: *Charles Babbage*", "Charles Babbage"),
        ("__Answer:__ The Beatles.", "The Beatles"),
        ('answer: "London"', "London"),
        ("ANSWER : 'yes'", "yes"),
        ("Answer: “Dune”.", "Dune"),
        ("The answer: maybe X.\nLet me check again.\nFinal Answer: 1843", "1843"),
        ("So the answer is: 42", "42"),
        ("Answer:\n\n  Iceland  \n", "Iceland"),
        ("Answer: Washington, D.C.", "Washington, D.C."),
        ("Answer: U.S.", "U.S."),
        ("Answer: Paris\nThis follows from passage 2.", "Paris"),
        ("It must be London.\n\nLondon\n", "London"),
        ("", ""),
        ("Answer:", ""),
    ],
)
def test_extract_answer(raw: str, answer: str) -> None:
    assert extract_answer(raw) == answer


def passage(pid: str, title: str | None, text: str) -> RetrievedPassage:
    return RetrievedPassage(id=pid, doc_id=pid, title=title, text=text, score=1.0)


PASSAGES = [
    passage("p1", "Ada Lovelace", "Ada Lovelace wrote notes on the Analytical Engine."),
    passage("p2", None, "Charles Babbage designed the Analytical Engine."),
]


def test_reader_messages_show_title_and_text_blocks() -> None:
    messages = build_reader_messages(QUESTION, PASSAGES)
    assert messages[0]["role"] == "system" and "Answer:" in messages[0]["content"]
    final = messages[-1]
    assert final["role"] == "user"
    assert "Ada Lovelace\nAda Lovelace wrote notes on the Analytical Engine." in final["content"]
    assert "Passage 2:\nCharles Babbage designed" in final["content"]
    assert final["content"].endswith(f"Question: {QUESTION}")


def test_read_end_to_end(fake_llm: FakeOpenAI) -> None:
    raw = "Lovelace wrote on the Analytical Engine, which Babbage designed.\n**Answer:** Charles Babbage"
    fake_llm.push(raw)
    assert read(fake_llm.chat(), QUESTION, PASSAGES) == ("Charles Babbage", raw)
    request = fake_llm.requests[0]
    assert task_of(request) == "reader" and "response_format" not in request


def test_read_uses_a_truncated_reply(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(reply("Babbage designed it.\nAnswer: Charles Bab", finish_reason="length"))
    assert read(fake_llm.chat(), QUESTION, PASSAGES)[0] == "Charles Bab"
