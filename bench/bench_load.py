"""Load run of `engram serve` over every retrieval method that needs no LLM (issue 52, item 4).

The memory: the 1,890 shared MuSiQue passages with the released OpenIE triples imported as extractions, embedded
by MiniLM (the default embedder), built once and kept in --cache (a copy is served, so the cached one stays as
built). The server (`engram serve` in a subprocess, 127.0.0.1 only) then takes, for --seconds, --readers
concurrent clients each cycling over the methods (hipporag2, hipporag2-paper, dense, bm25, hybrid, the ablations
and segment methods that need no LLM) with the MuSiQue questions, while one client POSTs new documents (each a
commit, so readers race commits all along). Printed: per method ok and error counts and p50/p99 latency; the
writer's. Exit status 1 on any error (a non-200 reply, a dropped connection).

    .venv/bin/python bench/bench_load.py                      # 32 readers + 1 writer for 60 s
    .venv/bin/python bench/bench_load.py --seconds 10 --readers 8 --limit 300   # a short smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx

from bench_server import serve
from engram import Document, Memory

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "engram-bench"
METHODS = (
    "hipporag2",
    "hipporag2-paper",
    "dense",
    "bm25",
    "hybrid",
    "hipporag2-query-to-node",
    "hipporag2-no-passage-nodes",
    "hipporag2-no-filter",
    "rse-dense",
    "rse-hipporag2",
)  # hipporag1 and hipporag2-ner-to-node ask an LLM for the query's entities; the peers need an LLM-built index
MEMORY = "/v1/memories/default"


def build(path: Path, embedder: str, limit: int | None, data: Path) -> None:
    """The MuSiQue memory at `path` (kept when it already exists with the same passages)."""
    rows = [json.loads(line) for line in (data / "corpus.jsonl").open(encoding="utf-8")][:limit]
    if path.exists():
        with Memory(path, embedder=embedder, llm=False) as memory:
            if memory.stats()["documents"] == len(rows):
                return
        shutil.rmtree(path)
    extractions = [json.loads(line) for line in (data / "openie-gpt-3.5-turbo-1106.jsonl").open(encoding="utf-8")]
    start = time.perf_counter()
    with Memory(path, embedder=embedder, llm=False) as memory:
        memory.index([Document(r["id"], r["text"], r.get("title")) for r in rows], extractions=extractions)
        stats = memory.stats()
    print(
        f"built: {stats['documents']} documents, {stats['facts']} facts in {time.perf_counter() - start:.0f} s",
        flush=True,
    )


def start_server(path: Path, embedder: str) -> tuple[subprocess.Popen[bytes], str]:
    return serve(path, embedder, [], {"ENGRAM_API_KEYS": ""}, 300)


class Load:
    """Readers over the methods and one writer; latencies and failures per method."""

    def __init__(self, client: httpx.AsyncClient, questions: list[str], methods: list[str], seconds: float) -> None:
        self.client, self.questions, self.methods = client, questions, methods
        self.stop = time.perf_counter() + seconds
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.took = 0.0

    async def call(self, name: str, path: str, body: dict[str, Any]) -> None:
        started = time.perf_counter()
        try:
            response = await self.client.post(path, json=body)
        except httpx.HTTPError as exc:
            self.errors[name] += 1
            self.failures[f"{name}: {type(exc).__name__}: {exc}"] += 1
            return
        if response.status_code != 200:
            self.errors[name] += 1
            self.failures[f"{name}: HTTP {response.status_code} {response.text[:200]}"] += 1
            return
        self.latencies[name].append(time.perf_counter() - started)

    async def reader(self, seed: int) -> None:
        i = seed
        while time.perf_counter() < self.stop:
            method = self.methods[i % len(self.methods)]
            query = self.questions[(i * 7) % len(self.questions)]
            await self.call(method, f"{MEMORY}/retrieve", {"query": query, "top_k": 5, "method": method})
            i += 1

    async def writer(self) -> None:
        i = 0
        while time.perf_counter() < self.stop:
            doc = {"id": f"loadwrite{i:05d}", "text": f"The loadwrite{i:05d} keeper guards a lighthouse on an island."}
            await self.call("writer: POST documents", f"{MEMORY}/documents", {"documents": [doc]})
            i += 1


def line(name: str, latencies: list[float], errors: int) -> str:
    lat = sorted(latencies)
    if not lat:
        return f"{name:<30} ok {0:6d}  errors {errors:4d}"
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [lat[0]] * 99
    return f"{name:<30} ok {len(lat):6d}  errors {errors:4d}  p50 {1000 * q[49]:8.1f} ms  p99 {1000 * q[98]:8.1f} ms"


async def run(url: str, questions: list[str], methods: list[str], readers: int, seconds: float) -> Load:
    # idle connections are dropped after 2 s, before the server's keep-alive timeout (uvicorn: 5 s) closes them:
    # at httpx's default of 5 s both sides give up on an idle connection at once, and a request sent on it just
    # as the server closes it fails with ReadError (HTTP/1.1's keep-alive race, not the server failing)
    limits = httpx.Limits(max_connections=readers + 1, max_keepalive_connections=readers + 1, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        for method in methods:  # warm each method once (its lazy parts: BM25 index, segment tables)
            reply = await client.post(f"{MEMORY}/retrieve", json={"query": questions[0], "method": method})
            if reply.status_code != 200:
                raise SystemExit(f"{method}: HTTP {reply.status_code} before the load: {reply.text[:300]}")
        load = Load(client, questions, methods, seconds)
        began = time.perf_counter()
        await asyncio.gather(*(load.reader(i) for i in range(readers)), load.writer())
        load.took = time.perf_counter() - began
    return load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--readers", type=int, default=32)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--limit", type=int, help="only the first N passages (smoke runs)")
    parser.add_argument("--methods", help="comma-separated methods (default: every one that needs no LLM)")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared MuSiQue folder (default: %(default)s)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the built memory is kept between runs")
    parser.add_argument("--build-only", action="store_true", help="build (or check) the cached memory and stop")
    args = parser.parse_args()
    if not args.data.is_dir():
        print(f"no shared data at {args.data}", file=sys.stderr)
        return 2
    methods = args.methods.split(",") if args.methods else list(METHODS)
    questions = [json.loads(line)["question"] for line in (args.data / "questions.jsonl").open(encoding="utf-8")]
    cached = args.cache / f"musique-{args.embedder.replace(':', '-')}-{args.limit or 'all'}.engram"
    cached.parent.mkdir(parents=True, exist_ok=True)
    build(cached, args.embedder, args.limit, args.data)
    if args.build_only:
        return 0
    with tempfile.TemporaryDirectory(prefix="engram-bench-load-") as tmp:
        path = Path(tmp) / "served.engram"
        shutil.copytree(cached, path)  # the writer's documents go to the copy
        proc, url = start_server(path, args.embedder)
        try:
            load = asyncio.run(run(url, questions, methods, args.readers, args.seconds))
        finally:
            proc.terminate()
            proc.wait(60)
    print(
        f"{args.readers} readers over {len(methods)} methods + 1 writer for {load.took:.0f} s "
        f"({os.cpu_count()} CPUs shared by the server and the clients; embedder {args.embedder})"
    )
    for method in methods:
        print(line(method, load.latencies[method], load.errors[method]))
    reads = [x for m in methods for x in load.latencies[m]]
    print(line("all reads", reads, sum(load.errors[m] for m in methods)))
    writer = "writer: POST documents"
    print(line(writer, load.latencies[writer], load.errors[writer]))
    for text, count in load.failures.most_common(10):
        print(f"error x{count}: {text}")
    return 1 if sum(load.errors.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
