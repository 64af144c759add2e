"""LLM extraction throughput against the scripted OpenAI-compatible server (issue 3, acceptance 3).

500 passages, every request answered after 200 ms, at most 16 requests in flight: the ideal wall time of the
extraction is calls x 0.2 s / 16; ours must stay within 1.3x of it. The server runs in its own process (a
real HTTP server on 127.0.0.1, as tests/fake_openai.py), so its threads do not share our interpreter. The
whole path is measured: `Memory.index` with the response cache, per-passage commits and accounting. A second
`index` of the same documents then shows the cache: no call at all.

    .venv/bin/python bench/bench_llm.py [--passages 500] [--latency 0.2] [--concurrency 16]

Exit status 1 when the ratio exceeds --bound (default 1.3).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))


def serve(latency: float, conn: Connection) -> None:
    """The child process: start the scripted server, send its URL, run until told to stop."""
    sys.path.insert(0, str(TESTS))
    from fake_openai import FakeOpenAI, openie_handler

    server = FakeOpenAI().start()
    server.handler = openie_handler(delay=latency)
    conn.send(server.base_url)
    conn.recv()
    conn.send(server.attempts)
    server.close()


def corpus(n: int) -> list[object]:
    from engram import Document

    return [
        Document(f"d{i:04d}", f"P{i} Word{i} meets Person{i % 13} in City{i % 7} on day {i}.", title=f"Doc{i}")
        for i in range(n)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server takes per request")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--bound", type=float, default=1.3, help="allowed ratio to the ideal")
    args = parser.parse_args()

    from engram import Memory
    from engram.embed import HashEmbedder
    from engram.llm import OpenAIChat

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    server = context.Process(target=serve, args=(args.latency, child), daemon=True)
    server.start()
    base_url = parent.recv()
    docs = corpus(args.passages)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            chat = OpenAIChat("fake-model", base_url=base_url, api_key="k", max_concurrency=args.concurrency)
            with Memory(Path(tmp) / "m", embedder=HashEmbedder(), llm=chat) as memory:
                start = time.perf_counter()
                report = memory.index(docs)
                total = time.perf_counter() - start
                start = time.perf_counter()
                again = memory.index(docs)
                again_extract = memory.extract()
                rerun = time.perf_counter() - start
            chat.close()
    finally:
        parent.send("stop")
        served = parent.recv()
        server.join(timeout=10)
    calls = report.llm.get("calls", 0)
    ideal = calls * args.latency / args.concurrency
    ours = report.timings["extract"]
    ratio = ours / ideal if ideal else float("inf")
    print(f"{report.extracted} passages extracted ({report.failed} failed), {calls} calls, server saw {served}")
    print(f"extraction  ours {ours:6.2f} s   ideal {ideal:6.2f} s (calls x {args.latency} s / {args.concurrency})")
    print(f"ratio {ratio:.3f} (bound {args.bound})   whole index() {total:.2f} s")
    print(
        f"re-index of the same documents: {again.unchanged} unchanged, "
        f"{again.llm.get('calls', 0) + again_extract.llm.get('calls', 0)} calls, {rerun:.2f} s"
    )
    return 0 if ratio <= args.bound and report.extracted == args.passages else 1


if __name__ == "__main__":
    sys.exit(main())
