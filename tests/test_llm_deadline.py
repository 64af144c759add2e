"""The LLM timeout bounds a whole request, not each read (issue 52, item 5): a server that sends its reply one
byte every 0.5 s answers every read in time, and kept `index` running past 300 s and `ask` past 120 s with a
5 s timeout. Each call here runs in a thread that must finish well within a bound; the server stops trickling
when the test closes it, so a failing test ends too."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram import Memory
from engram.embed import HashEmbedder
from engram.errors import LLMError
from engram.llm.failures import LLMTimeoutError, LLMUnreachableError
from fake_openai import FakeOpenAI, trickle
from helpers import DOCS, EXTRACTIONS


def finishes_within(seconds: float, call: Callable[[], Any]) -> tuple[Any, BaseException | None, float]:
    """(result, error, elapsed) of `call()`; fails the test when it runs longer than `seconds`."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = call()
        except BaseException as exc:
            out["error"] = exc

    start = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s: the timeout does not bound the request"
    return out.get("result"), out.get("error"), time.monotonic() - start


def test_one_call_is_cut_off_at_the_timeout(fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: trickle(0.5)
    chat = fake_llm.chat(timeout=2.0, max_retries=1, give_up_after=0)
    _, error, elapsed = finishes_within(10, lambda: chat.complete([{"role": "user", "content": "hi"}]))
    assert isinstance(error, LLMTimeoutError), error
    assert 3.5 < elapsed < 8  # two attempts of 2 s each, and a short backoff
    assert fake_llm.attempts == 2


def test_index_stops_when_every_reply_trickles(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: trickle(0.5)
    chat = fake_llm.chat(timeout=2.0, max_retries=4, give_up_after=3)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat) as memory:
        _, error, _ = finishes_within(20, lambda: memory.index(DOCS))
    assert isinstance(error, LLMUnreachableError), error  # three silent attempts in a row: taken as down


def test_ask_answers_or_fails_within_the_query_timeout(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: trickle(0.5)
    chat = fake_llm.chat(timeout=2.0, max_retries=4, give_up_after=3)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        _, error, elapsed = finishes_within(20, lambda: memory.answer("Where was Alice Moreau born?"))
    assert isinstance(error, LLMError), error
    assert "2" in str(error) and elapsed < 15


def test_a_reply_that_trickles_within_the_timeout_still_arrives(fake_llm: FakeOpenAI) -> None:
    """The deadline cuts off slow replies only: a reply sent slowly but within the timeout is read."""
    fake_llm.push(trickle(0.01, content="ok"))
    chat = fake_llm.chat(timeout=30.0, max_retries=0)
    result, error, _ = finishes_within(30, lambda: chat.complete([{"role": "user", "content": "hi"}]))
    assert error is None and result == "ok"
