"""Issue 52, item 1: "any sequence equals a fresh build" holds for `engram extract` runs stopped by SIGKILL.

Passages are indexed without an LLM (all pending), then `engram extract` runs against the scripted server and is
killed with SIGKILL at seeded points, a few times, before a last run finishes. The memory must then equal a fresh
build from the same extractions: the same stats (facts, phrases, relation, synonym and context edges), the same
phrases per passage, the same stored synonym lists and the same rankings, on the directory backend and on
PostgreSQL. Names come in near-duplicate forms ("North Harbor Trading Company" / "... Ltd") that the hash
embedder scores above the synonym threshold, so a lost list shows.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from fake_openai import FakeOpenAI, Spec, passage_of, reply, task_of
from helpers import fake_llm_env
from pg_fixture import backend_place, pg_server  # noqa: F401

PASSAGES = 120
QUERIES = [
    "north harbor trading company",
    "blue forest farm union ltd",
    "grand stone mill works group",
    "old river bridge guild",
    "red valley trading company group",
]
ADJ = ["north", "south", "grand", "old", "red", "blue"]
NOUN = ["harbor", "river", "stone", "valley", "forest"]
KIND = ["trading company", "mill works", "bridge guild", "farm union"]
SUFFIX = ["", " ltd", " group"]


def name(k: int) -> str:
    return f"{ADJ[k % 6]} {NOUN[(k // 6) % 5]} {KIND[(k // 30) % 4]}{SUFFIX[(k // 120) % 3]}".title()


def documents() -> list[Document]:
    out = []
    for i in range(PASSAGES):
        pick = random.Random(i)
        out.append(Document(f"d{i:03d}", " | ".join(name(pick.randrange(360)) for _ in range(3)), title=f"Doc{i}"))
    return out


def answer(request: dict[str, Any]) -> Spec | None:
    """Entities: the names between bars; triples chain them."""
    names = [part.strip() for part in passage_of(request).split("\n", 1)[-1].split("|")]
    task = task_of(request)
    if task == "ner":
        return reply(json.dumps({"entities": names}), delay=0.02)
    if task == "triples":
        return reply(json.dumps({"triples": [[a, "trades with", b] for a, b in itertools.pairwise(names)]}), delay=0.02)
    return None


def engram_extract(where: str | Path, server: FakeOpenAI) -> subprocess.Popen[bytes]:
    env = fake_llm_env(server.base_url)
    command = [sys.executable, "-m", "engram.cli", "extract", "--memory", str(where), "--embedder", "hash"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def synonym_rows(where: str | Path) -> list[tuple[str, str, float]]:
    """The stored synonym lists (phrase, neighbour, similarity), sorted."""
    if isinstance(where, Path):
        with sqlite3.connect(where / "engram.sqlite") as db:
            rows = db.execute("SELECT phrase, neighbour, sim FROM synonyms").fetchall()
    else:
        import psycopg

        conninfo, schema = where.rsplit("?schema=", 1) if "?schema=" in where else where.rsplit("&schema=", 1)
        with psycopg.connect(conninfo, autocommit=True) as db:
            rows = db.execute(f'SELECT phrase, neighbour, sim FROM "{schema}".synonyms').fetchall()
    return sorted((str(p), str(n), round(float(s), 5)) for p, n, s in rows)


def graph_of(where: str | Path) -> dict[str, Any]:
    with Memory(where, embedder="hash", llm=False) as memory:
        stats = {k: v for k, v in memory.stats().items() if k not in ("llm", "generation")}
        phrases = {d.id: sorted(memory.phrases_of(d.id)) for d in documents()}
        rankings = [[(p.id, round(p.score, 5)) for p in r.passages] for r in memory.retrieve(QUERIES, top_k=10)]
    return {"stats": stats, "phrases": phrases, "rankings": rankings, "synonyms": synonym_rows(where)}


def kill_after(where: str | Path, server: FakeOpenAI, requests: int) -> None:
    """Start `engram extract` and SIGKILL it once the server has answered `requests` more requests."""
    start = server.attempts
    process = engram_extract(where, server)
    deadline = time.monotonic() + 60
    while server.attempts - start < requests:
        assert process.poll() is None, f"finished before the kill: {process.stderr.read() if process.stderr else ''}"
        assert time.monotonic() < deadline, "extraction did not progress"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()


def finish(where: str | Path, server: FakeOpenAI) -> None:
    process = engram_extract(where, server)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr.decode()


@pytest.fixture(params=["directory", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return backend_place(request, tmp_path)


@pytest.mark.parametrize("seed", [52])
def test_killed_extract_runs_equal_a_fresh_build(place: Any, fake_llm: FakeOpenAI, seed: int) -> None:
    fake_llm.handler = answer
    killed, fresh = place("killed"), place("fresh")
    for where in (killed, fresh):
        with Memory(where, embedder="hash", llm=False) as memory:
            assert memory.index(documents()).pending == PASSAGES
    pick = random.Random(seed)
    for _ in range(3):  # each run is stopped after a seeded share of the requests left
        kill_after(killed, fake_llm, pick.randrange(20, PASSAGES // 2))
    finish(killed, fake_llm)
    with Memory(fresh, embedder="hash", llm=fake_llm.chat()) as memory:
        memory.extract()
    crashed, reference = graph_of(killed), graph_of(fresh)
    assert reference["stats"]["pending"] == 0 and reference["stats"]["synonym_edges"] > 50
    assert crashed["stats"] == reference["stats"]
    assert crashed["synonyms"] == reference["synonyms"]
    assert crashed["phrases"] == reference["phrases"]
    assert crashed["rankings"] == reference["rankings"]
