"""Extraction against replies a real small model wrote (Qwen2.5-Coder-1.5B-Instruct on llama-server, recorded by
bench/record_replies.py into tests/data/real_replies.json on passages written for the tests), replayed by the
scripted server: what engram asks for (a reply cap scaled to the passage, a JSON schema), what it reads from
those replies, and a reply cut off at the length limit, as a looping model's is."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from engram.extract.openie import NER_REPLY_CAP, TRIPLES_REPLY_CAP, extract_passage, reply_cap
from fake_openai import FakeOpenAI, reply

RECORD = json.loads((Path(__file__).resolve().parent / "data" / "real_replies.json").read_text(encoding="utf-8"))
PASSAGES: list[dict[str, Any]] = RECORD["passages"]
COMPLETE_TRIPLE = re.compile(r'\[\s*"(?:[^"\\]|\\.)*"\s*,\s*"(?:[^"\\]|\\.)*"\s*,\s*"(?:[^"\\]|\\.)*"\s*\]')


def replay(fake: FakeOpenAI, *replies: dict[str, Any]) -> None:
    fake.push(*(reply(r["text"], finish_reason="length" if r["cut_off"] else "stop") for r in replies))


@pytest.mark.parametrize("row", PASSAGES, ids=[r["title"] for r in PASSAGES])
def test_a_real_reply_is_read_whole_under_a_cap_and_a_schema(fake_llm: FakeOpenAI, row: dict[str, Any]) -> None:
    assert not row["ner"]["cut_off"] and not row["triples"]["cut_off"]
    replay(fake_llm, row["ner"], row["triples"])
    outcome = extract_passage(fake_llm.chat(response_format="json_schema"), row["text"], row["title"])
    assert outcome.ok and outcome.dropped == 0
    assert outcome.entities == json.loads(row["ner"]["text"])["entities"]
    assert len(outcome.triples) == len(COMPLETE_TRIPLE.findall(row["triples"]["text"]))
    ner, triples = fake_llm.requests
    block = f"{row['title']}\n{row['text']}"
    assert ner["max_tokens"] == reply_cap(NER_REPLY_CAP, block)
    assert triples["max_tokens"] == reply_cap(TRIPLES_REPLY_CAP, block)
    assert ner["response_format"]["type"] == triples["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize("row", PASSAGES, ids=[r["title"] for r in PASSAGES])
def test_a_reply_cut_off_at_the_cap_keeps_its_complete_triples(fake_llm: FakeOpenAI, row: dict[str, Any]) -> None:
    """A small model that loops fills its cap; asking again would loop again. The complete triples before the
    cut are kept (an independent oracle: the complete triples a regular expression finds in the cut text),
    and no repair request is sent."""
    tight = row["triples_tight"]
    assert tight["cut_off"]
    expected = [tuple(json.loads(t)) for t in COMPLETE_TRIPLE.findall(tight["text"])]
    assert expected, "the recorded cut-off reply holds no complete triple"
    replay(fake_llm, row["ner"], tight)
    outcome = extract_passage(fake_llm.chat(response_format="json_schema"), row["text"], row["title"])
    assert outcome.ok
    assert outcome.triples == expected
    assert fake_llm.attempts == 2
