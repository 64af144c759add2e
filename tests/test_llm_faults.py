"""Acceptance 1: every fault the scripted server can inject, end to end through `Memory.index`.

Each case checks how the run ends (passage done, passage failed with the reason, or the run stopped with a
message naming the fix) and that the attempts the server counted stay within the configured bound.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.errors import LLMConfigError
from fake_openai import FakeOpenAI, Spec, error, hang, last_user_text, openie_answer, openie_handler, reply, task_of

DOC = Document("ada", "Ada Lovelace wrote notes on the Analytical Engine of Charles Babbage.", title="Ada")
NER = json.dumps({"entities": ["Ada Lovelace", "Analytical Engine", "Charles Babbage"]})
TRIPLES = json.dumps({"triples": [["Ada Lovelace", "wrote notes on", "Analytical Engine"]]})


def memory(tmp_path: Path, chat: Any) -> Memory:
    return Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat)


def rows(tmp_path: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(tmp_path / "m" / "engram.sqlite") as db:
        return [(s, e) for s, e in db.execute("SELECT status, error FROM extractions")]


def test_429_waits_for_retry_after_then_succeeds(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.push(error(429, "rate limited", retry_after=0.3), NER, TRIPLES)
    started = time.monotonic()
    with memory(tmp_path, fake_llm.chat(max_retries=2)) as m:
        report = m.index([DOC])
        llm = m.stats()["llm"]["total"]
    assert time.monotonic() - started >= 0.28
    assert report.extracted == 1 and report.failed == 0
    assert fake_llm.attempts == 3  # one refused, then one per step
    assert llm["retries"] == 1 and llm["calls"] == 2 and llm["failures"] == 0


def test_500_is_retried_with_backoff(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.push(error(500), error(503), NER, error(502), TRIPLES)
    with memory(tmp_path, fake_llm.chat(max_retries=2)) as m:
        report = m.index([DOC])
    assert report.extracted == 1
    assert fake_llm.attempts == 5


def test_persistent_500_fails_the_passage_and_the_run_goes_on(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    def handler(request: dict[str, Any]) -> Spec | str | None:
        return error(500, "boom") if "Broken" in last_user_text(request) else openie_answer(request)

    fake_llm.handler = handler
    docs = [DOC, Document("bad", "Broken Passage text.", title="Broken")]
    with memory(tmp_path, fake_llm.chat(max_retries=2)) as m:
        report = m.index(docs)
        llm = m.stats()["llm"]["total"]
    assert report.extracted == 1 and report.failed == 1
    failed = [e for s, e in rows(tmp_path) if s == "failed"]
    assert len(failed) == 1 and failed[0] is not None and "HTTP 500" in failed[0]
    bad = [r for r in fake_llm.requests if "Broken" in last_user_text(r)]
    assert len(bad) == 3  # max_retries + 1 for its first step; its second step never runs
    assert llm["failures"] == 1 and llm["retries"] == 2


def test_a_hang_past_the_timeout_is_retried(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.push(hang(3), NER, TRIPLES)
    with memory(tmp_path, fake_llm.chat(timeout=0.3, max_retries=1)) as m:
        report = m.index([DOC])
    assert report.extracted == 1
    assert fake_llm.attempts == 3


def test_persistent_hang_fails_the_passage_with_the_reason(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = lambda request: hang(3)
    with memory(tmp_path, fake_llm.chat(timeout=0.2, max_retries=1)) as m:
        report = m.index([DOC])
    assert report.failed == 1
    [(status, reason)] = rows(tmp_path)
    assert status == "failed" and reason is not None and "did not answer within 0.2s" in reason
    assert fake_llm.attempts == 2


def test_malformed_json_is_asked_again_with_the_error_then_recorded(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.push("Sure! {entities: [Ada", "I really cannot produce JSON")
    with memory(tmp_path, fake_llm.chat()) as m:
        report = m.index([DOC])
    assert report.failed == 1 and report.extracted == 0
    assert fake_llm.attempts == 2  # the first reply, then one retry; never a third
    retry = fake_llm.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "Sure! {entities: [Ada"}
    assert "could not be used" in retry[-1]["content"] and "cut off" in retry[-1]["content"]
    [(status, reason)] = rows(tmp_path)
    assert status == "failed" and reason is not None and reason.startswith("unreadable reply")


def test_wrong_shape_is_validated_and_retried(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.push('{"names": ["Ada"]}', NER, '{"facts": []}', '{"triples": "none"}')
    with memory(tmp_path, fake_llm.chat()) as m:
        report = m.index([DOC])
    assert report.failed == 1
    assert fake_llm.attempts == 4
    assert 'no "entities" list' in fake_llm.requests[1]["messages"][-1]["content"]
    [(_, reason)] = rows(tmp_path)
    assert reason is not None and 'no "triples" list' in reason


def test_truncated_output_is_asked_again_then_recorded(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    """A reply cut off before any complete item has nothing to salvage (tests/test_real_replies.py: one with
    complete items keeps them): it is asked again, and a second cut-off fails the passage."""
    cut = reply('{"entities": ["Ada Lovel', finish_reason="length")
    fake_llm.push(cut, cut)
    with memory(tmp_path, fake_llm.chat()) as m:
        report = m.index([DOC])
    assert report.failed == 1 and fake_llm.attempts == 2
    assert "shorter" in fake_llm.requests[1]["messages"][-1]["content"]
    [(_, reason)] = rows(tmp_path)
    assert reason is not None and "cut off" in reason


def test_unknown_model_fails_fast_naming_the_setting(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler()
    docs = [Document(f"d{i}", f"Passage Number{i} here.") for i in range(20)]
    with memory(tmp_path, fake_llm.chat(model="no-such-model")) as m:
        with pytest.raises(LLMConfigError, match="ENGRAM_LLM_MODEL") as caught:
            m.index(docs)
        assert "no-such-model" in str(caught.value)
        assert m.stats()["documents"] == 0  # nothing was committed
    assert fake_llm.attempts == 1  # no retry, and no other passage was sent


def test_wrong_key_fails_fast(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.required_key = "sk-right"
    with memory(tmp_path, fake_llm.chat(api_key="sk-wrong")) as m, pytest.raises(LLMConfigError, match="API key"):
        m.index([DOC, Document("b", "Bob went to Oslo.")])
    assert fake_llm.attempts == 1


def test_json_schema_is_sent_when_asked_for(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler()
    with memory(tmp_path, fake_llm.chat(response_format="json_schema")) as m:
        m.index([DOC])
    formats = {task_of(r): r["response_format"] for r in fake_llm.requests}
    assert formats["ner"]["type"] == "json_schema"
    assert formats["ner"]["json_schema"]["schema"]["required"] == ["entities"]
    assert formats["triples"]["json_schema"]["name"] == "triples"
    assert formats["ner"]["json_schema"]["strict"] is True


def test_response_format_none_sends_no_response_format(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler()
    with memory(tmp_path, fake_llm.chat(response_format="none")) as m:
        assert m.index([DOC]).extracted == 1
    assert all("response_format" not in r for r in fake_llm.requests)


def test_server_without_json_schema_support_names_the_setting(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.push(error(400, "response_format json_schema is not supported by this server"))
    chat = fake_llm.chat(response_format="json_schema")
    with memory(tmp_path, chat) as m, pytest.raises(LLMConfigError, match="ENGRAM_LLM_RESPONSE_FORMAT"):
        m.index([DOC])
    assert fake_llm.attempts == 1
