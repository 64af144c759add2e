"""Acceptance 3 at test scale: extraction keeps the server saturated at the concurrency limit.

bench/bench_llm.py is the measurement the issue asks for (500 passages, 200 ms per request, 16 in flight, the
server in its own process, bound 1.3x; measured 1.10x). Here the server shares the test's interpreter and the
machine is shared (other test runs load it), so the wall-time bound only catches a lost concurrency (one
request at a time would take 16x); that the server is kept busy up to the limit, never above, is checked directly.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engram import Document, Memory
from engram.embed import HashEmbedder
from fake_openai import FakeOpenAI, InFlight, Spec, openie_answer, reply

LATENCY, CONCURRENCY, PASSAGES = 0.1, 16, 80


def test_extraction_runs_near_the_ideal_wall_time(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    in_flight = InFlight()

    def handler(request: dict[str, Any]) -> Spec | None:
        with in_flight:
            time.sleep(LATENCY)
        answer = openie_answer(request)
        return None if answer is None else reply(answer)

    fake_llm.handler = handler
    docs = [Document(f"d{i}", f"P{i} Word{i} meets Person{i % 9}.") for i in range(PASSAGES)]
    chat = fake_llm.chat(max_concurrency=CONCURRENCY)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat) as memory:
        report = memory.index(docs)
    ours = report.timings["extract"]
    ideal = report.llm["calls"] * LATENCY / CONCURRENCY
    print(f"extraction: ours {ours:.2f} s, ideal {ideal:.2f} s, ratio {ours / ideal:.2f}")
    assert report.extracted == PASSAGES and report.llm["calls"] == 2 * PASSAGES
    # never above the limit, and (nearly: the shared machine delays some handler threads) saturated
    assert CONCURRENCY // 2 <= in_flight.peak <= CONCURRENCY
    assert ours <= 4.0 * ideal  # one request at a time would be 16x; measured 1.3x on an idle machine
