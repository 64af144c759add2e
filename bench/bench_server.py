"""Load benchmark of `engram serve` (issue 12, acceptance item 4).

A memory of the 1,890 shared MuSiQue passages, with the released OpenIE triples imported as extractions. Then,
in one run:
  1. in-process: `Memory.retrieve` by 1 thread, then by 32 threads (the baseline);
  2. the server (`engram serve` in a subprocess, 127.0.0.1): 1 client, then 32 concurrent clients retrieving
     for --seconds while one client adds and deletes documents.
Reported: requests/s, p50/p95/p99 latency, errors, and what readers saw of the writes. The writer's documents
carry one unique fact; readers also send that fact as a query and record whether the passage and the fact were
in the result: a reader that sees one without the other saw a half-indexed document; a reader that started
after an add was acknowledged and missed it (or after a delete and still saw it) saw a stale memory.

    .venv/bin/python bench/bench_server.py --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from threadpoolctl import threadpool_limits

from engram import Document, Memory

RETRIEVE, DOCUMENTS = "/v1/memories/default/retrieve", "/v1/memories/default/documents"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    server: list[float] = field(default_factory=list)  # the app's own time per request (Server-Timing)

    def line(self, name: str) -> str:
        lat = sorted(self.latencies)
        if not lat:
            return f"{name:<38} no requests"
        q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [lat[0]] * 99
        line = (
            f"{name:<38} {len(lat) / self.seconds:8.1f} req/s  p50 {1000 * q[49]:7.2f} ms  p95 {1000 * q[94]:7.2f} ms"
            f"  p99 {1000 * q[98]:7.2f} ms  errors {self.errors}  (n={len(lat)})"
        )
        if self.server:
            line += f"\n{'':<38} of which inside the app: p50 {1000 * statistics.median(self.server):.2f} ms"
        return line


@dataclass
class Marker:
    """One write of the writer: a document with one unique fact, and when the server acknowledged it."""

    doc_id: str
    query: str
    added: float = 0.0
    deleted: float = 0.0
    delete_sent: float = 0.0


@dataclass
class Sighting:
    doc_id: str
    started: float
    finished: float
    passage: bool
    fact: bool


def load(limit: int | None) -> tuple[list[Document], list[dict[str, Any]], list[str]]:
    rows = [json.loads(line) for line in (DATA / "corpus.jsonl").open(encoding="utf-8")]
    extractions = [json.loads(line) for line in (DATA / "openie-gpt-3.5-turbo-1106.jsonl").open(encoding="utf-8")]
    questions = [json.loads(line)["question"] for line in (DATA / "questions.jsonl").open(encoding="utf-8")]
    docs = [Document(r["id"], r["text"], r.get("title")) for r in rows[:limit]]
    return docs, extractions, questions


def build(path: Path, embedder: str, limit: int | None) -> list[str]:
    docs, extractions, questions = load(limit)
    start = time.perf_counter()
    with Memory(path, embedder=embedder, llm=False) as memory:
        memory.index(docs, extractions=extractions)
        stats = memory.stats()
    print(
        f"memory: {stats['documents']} documents, {stats['passages']} passages, {stats['facts']} facts, "
        f"{stats['edges']} edges; built in {time.perf_counter() - start:.1f} s (embedder {embedder})"
    )
    return questions


def marker_document(i: int) -> tuple[str, str, dict[str, Any]]:
    """The writer's i-th document: (id, text, extraction with one unique fact)."""
    doc_id = f"benchwrite{i:05d}"  # no punctuation: phrases are normalised
    text = f"The {doc_id} keeper guards the lighthouse {doc_id} on a northern island."
    extraction = {"id": doc_id, "entities": [f"{doc_id} keeper", f"lighthouse {doc_id}"],
                  "triples": [[f"{doc_id} keeper", "guards", f"lighthouse {doc_id}"]]}
    return doc_id, text, extraction


def in_process_writer(memory: Memory, stop: float, hold: float, stats: Stats) -> None:
    """The same add / hold / delete cycle as the HTTP writer, on the Memory itself."""
    i = 0
    while time.perf_counter() < stop - hold:
        doc_id, text, extraction = marker_document(i)
        started = time.perf_counter()
        memory.index([Document(doc_id, text)], extractions=[extraction])
        stats.latencies.append(time.perf_counter() - started)
        time.sleep(hold)
        started = time.perf_counter()
        memory.delete([doc_id])
        stats.latencies.append(time.perf_counter() - started)
        time.sleep(hold)
        i += 1


def in_process(
    path: Path, embedder: str, questions: list[str], threads: int, seconds: float, writer: bool = False
) -> Stats:
    stats, lock, writes = Stats(), threading.Lock(), Stats()
    with Memory(path, embedder=embedder, llm=False) as memory:
        memory.retrieve(questions[0])  # warm: load the index and the view
        stop = time.perf_counter() + seconds

        def reader(seed: int) -> None:
            rng = random.Random(seed)
            while time.perf_counter() < stop:
                started = time.perf_counter()
                try:
                    memory.retrieve(rng.choice(questions), top_k=5)
                except Exception:
                    with lock:
                        stats.errors += 1
                    continue
                with lock:
                    stats.latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        workers = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
        if writer:
            workers.append(threading.Thread(target=in_process_writer, args=(memory, stop, 1.0, writes)))
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        stats.seconds = time.perf_counter() - began
    return stats


def start_server(path: Path, embedder: str, blas: int, threads: int | None) -> tuple[subprocess.Popen[bytes], str]:
    args = ["--blas-threads", str(blas), *(["--threads", str(threads)] if threads else [])]
    return serve(path, embedder, args, {}, 120, quiet=True)


def serve(
    path: Path, embedder: str, args: list[str], env: dict[str, str], timeout: float, quiet: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    """`engram serve` of the memory at `path` on a free 127.0.0.1 port, without an LLM; returns once its health
    check answers (exits if it does not within `timeout` seconds, or if the server stops)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = "import sys; from engram.cli import main; sys.exit(main())"
    argv = ["serve", "--memory", str(path), "--embedder", embedder, "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", *args]  # fmt: skip
    full_env = {**os.environ, "ENGRAM_LLM_BASE_URL": "", "ENGRAM_LLM_MODEL": "", **env}
    stderr = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], env=full_env, stderr=stderr)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("the server did not start")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Conn:
    """One keep-alive HTTP/1.1 connection with a minimal client (a few microseconds of Python per request, so
    the clients leave the CPU to the server; httpx spends milliseconds)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, str, bytes]:
        """(status, Server-Timing header, body)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
        self.writer.write(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
        status_line, *lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines if ": " in line)
        payload = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), headers.get("server-timing", ""), payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class Load:
    """Readers and one writer against the server, with the writer's markers shared with the readers."""

    def __init__(self, url: str, questions: list[str], seconds: float, marker_share: float) -> None:
        self.url, self.questions, self.seconds, self.marker_share = url, questions, seconds, marker_share
        self.reads, self.writes = Stats(), Stats()
        self.markers: list[Marker] = []
        self.sightings: list[Sighting] = []
        self.failures: list[str] = []
        self.stop = 0.0

    def conn(self) -> Conn:
        host, port = self.url.removeprefix("http://").split(":")
        return Conn(host, int(port))

    async def call(self, conn: Conn, stats: Stats, method: str, path: str, body: Any = None) -> bytes | None:
        started = time.perf_counter()
        try:
            status, timing, payload = await conn.request(method, path, body)
        except (OSError, asyncio.IncompleteReadError) as exc:
            stats.errors += 1
            self.failures.append(f"{type(exc).__name__}: {exc}")
            conn.writer = None
            return None
        if status != 200:
            stats.errors += 1
            self.failures.append(f"HTTP {status}: {payload[:200]!r}")
            return None
        stats.latencies.append(time.perf_counter() - started)
        if timing.startswith("app;dur="):
            stats.server.append(float(timing.removeprefix("app;dur=")) / 1000)
        return payload

    async def reader(self, seed: int) -> None:
        rng, conn = random.Random(seed), self.conn()
        while time.perf_counter() < self.stop:
            marker = self.markers[-1] if self.markers and rng.random() < self.marker_share else None
            query = marker.query if marker else rng.choice(self.questions)
            started = time.perf_counter()
            payload = await self.call(conn, self.reads, "POST", RETRIEVE, {"query": query, "top_k": 5})
            if marker is None or payload is None:
                continue
            result = json.loads(payload)["results"][0]
            passage = any(p["doc_id"] == marker.doc_id for p in result["passages"])
            fact = any(f["subject"] == f"{marker.doc_id} keeper" for f in result["candidate_facts"])
            self.sightings.append(Sighting(marker.doc_id, started, time.perf_counter(), passage, fact))
        conn.close()

    async def writer(self, hold: float) -> None:
        conn, i = self.conn(), 0
        while time.perf_counter() < self.stop - hold:
            doc_id, text, extraction = marker_document(i)
            marker = Marker(doc_id, f"{doc_id} keeper guards lighthouse {doc_id}")
            body = {"documents": [{"id": doc_id, "text": text}], "extractions": [extraction]}
            if await self.call(conn, self.writes, "POST", DOCUMENTS, body) is None:
                break
            marker.added = time.perf_counter()
            self.markers.append(marker)
            await asyncio.sleep(hold)
            marker.delete_sent = time.perf_counter()
            if await self.call(conn, self.writes, "DELETE", f"{DOCUMENTS}/{doc_id}") is None:
                break
            marker.deleted = time.perf_counter()
            await asyncio.sleep(hold)
            i += 1
        conn.close()

    async def run(self, readers: int, writer: bool, hold: float = 1.0) -> None:
        warm = self.conn()
        await self.call(warm, Stats(), "POST", RETRIEVE, {"query": self.questions[0]})
        warm.close()
        began = time.perf_counter()
        self.stop = began + self.seconds
        tasks = [self.reader(i) for i in range(readers)] + ([self.writer(hold)] if writer else [])
        await asyncio.gather(*tasks)
        self.reads.seconds = self.writes.seconds = time.perf_counter() - began


def judge(load: Load) -> list[str]:
    """What the readers saw of the writes."""
    by_id = {m.doc_id: m for m in load.markers}
    half = [s for s in load.sightings if s.passage != s.fact]
    def live(s: Sighting) -> bool:  # started after the add was acknowledged, ended before the delete was sent
        m = by_id[s.doc_id]
        return m.added < s.started and (not m.delete_sent or s.finished < m.delete_sent)

    should_see = [s for s in load.sightings if live(s)]
    gone = [s for s in load.sightings if by_id[s.doc_id].deleted and s.started > by_id[s.doc_id].deleted]
    seen = {s.doc_id for s in load.sightings if s.passage}
    return [
        f"writer: {len(load.markers)} documents added and deleted, {load.writes.errors} write errors",
        f"readers' marker queries: {len(load.sightings)}; saw the document {sum(s.passage for s in load.sightings)}",
        f"  half-indexed sightings (passage without its fact or the reverse): {len(half)}",
        f"  missed an acknowledged add: {sum(not s.passage for s in should_see)} of {len(should_see)}",
        f"  still saw a document after its delete was acknowledged: {sum(s.passage for s in gone)} of {len(gone)}",
        f"  writes seen by at least one reader: {len(seen)} of {len(load.markers)}",
        *(f"error: {text}" for text in sorted(set(load.failures))[:5]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the 32-reader server phase")
    parser.add_argument("--readers", type=int, default=32)
    parser.add_argument("--embedder", default="hash", help="embedder spec (hash: no model; minilm: the default)")
    parser.add_argument("--limit", type=int, help="only the first N passages (smoke runs)")
    parser.add_argument("--blas-threads", type=int, default=1, help="BLAS threads, in-process and in the server")
    parser.add_argument("--server-threads", type=int, help="the server's --threads (default: its own default)")
    parser.add_argument("--marker-share", type=float, default=0.2, help="share of reads that ask for the marker")
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"no shared data at {DATA}", file=sys.stderr)
        sys.exit(2)
    threadpool_limits(limits=args.blas_threads)  # the same for the in-process baseline as for the server
    short = max(5.0, args.seconds / 4)
    with tempfile.TemporaryDirectory(prefix="engram-bench-server-") as tmp:
        path = Path(tmp) / "musique.engram"
        questions = build(path, args.embedder, args.limit)
        print(
            f"machine: {os.cpu_count()} CPUs shared by server and clients; BLAS threads {args.blas_threads}; "
            f"phases {short:.0f} s, load {args.seconds:.0f} s"
        )
        print(in_process(path, args.embedder, questions, 1, short).line("in-process Memory.retrieve, 1 thread"))
        inner = in_process(path, args.embedder, questions, args.readers, short)
        print(inner.line(f"in-process Memory.retrieve, {args.readers} threads"))
        inner = in_process(path, args.embedder, questions, args.readers, short, writer=True)
        print(inner.line(f"in-process, {args.readers} threads + 1 writer"))
        proc, url = start_server(path, args.embedder, args.blas_threads, args.server_threads)
        try:
            single = Load(url, questions, short, 0.0)
            asyncio.run(single.run(1, writer=False))
            print(single.reads.line("server, 1 client"))
            readers = Load(url, questions, short, 0.0)
            cpu = cpu_seconds(proc.pid), time.process_time()
            asyncio.run(readers.run(args.readers, writer=False))
            print(readers.reads.line(f"server, {args.readers} clients, no writer"))
            server_cpu, client_cpu = cpu_seconds(proc.pid) - cpu[0], time.process_time() - cpu[1]
            print(f"  CPU seconds in that phase: server {server_cpu:.1f}, clients {client_cpu:.1f}")
            load = Load(url, questions, args.seconds, args.marker_share)
            asyncio.run(load.run(args.readers, writer=True))
            print(load.reads.line(f"server, {args.readers} clients + 1 writer"))
            print(load.writes.line("server, the writer's adds and deletes"))
            for line in judge(load):
                print(line)
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
