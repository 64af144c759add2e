"""Query NER over a batch of queries: the calls run concurrently (like the recognition filter's), each query
gets its own entities back, and an unreadable reply is asked about once more (the shared "ask for JSON, repair
once" of `engram.llm.json_reply`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from engram import Memory
from engram.embed import HashEmbedder
from engram.retrieve.query_ner import QUERY_NER_SYSTEM, query_entities, query_entities_many
from fake_openai import FakeOpenAI, InFlight, last_user_text
from helpers import DOCS, EXTRACTIONS

QUESTIONS = [f"Where was Person{i} born?" for i in range(6)]


def ner_handler(in_flight: InFlight) -> Any:
    def handle(request: dict[str, Any]) -> str | None:
        if request["messages"][0]["content"] != QUERY_NER_SYSTEM:
            return None
        with in_flight:
            time.sleep(0.2)
        name = last_user_text(request).split()[3]  # "Question: Where was NAME born?"
        return json.dumps({"entities": [name]})

    return handle


def test_query_ner_calls_of_a_batch_run_concurrently(fake_llm: FakeOpenAI) -> None:
    in_flight = InFlight()
    fake_llm.handler = ner_handler(in_flight)
    found = query_entities_many(fake_llm.chat(max_concurrency=4), QUESTIONS)
    assert found == [[f"Person{i}"] for i in range(6)]
    assert 1 < in_flight.peak <= 4


def test_hipporag1_retrieval_asks_the_batch_concurrently(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    in_flight = InFlight()
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat(max_concurrency=4)) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        fake_llm.handler = ner_handler(in_flight)
        results = memory.retrieve(QUESTIONS, method="hipporag1")
    assert len(results) == len(QUESTIONS) and fake_llm.attempts == len(QUESTIONS)
    assert in_flight.peak > 1


def test_an_unreadable_query_ner_reply_is_repaired_once(fake_llm: FakeOpenAI) -> None:
    fake_llm.push("no entities here", '{"entities": ["Lyon"]}', "still no JSON", "nor here")
    chat = fake_llm.chat()
    assert query_entities(chat, "Which river flows through Lyon?") == ["Lyon"]
    repair = fake_llm.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "no entities here"}
    again = repair[-1]["content"]
    assert again.startswith("Your reply could not be used") and "JSON object only" in again
    assert query_entities(chat, "Which river flows through Oslo?") == []  # unreadable twice: no entities
    assert fake_llm.attempts == 4
