"""Issue 54, item 4: several `engram extract` processes share one memory's pending passages (claims,
engram.extract.claims).

200 passages are indexed without an LLM (all pending); four `engram extract` processes then run on the memory
at once against the scripted server. Each worker asks for a model of its own, so the server's request log
tells who sent what. Every passage's extraction prompts must reach the server exactly once, and the memory must
then hold 200 finished, linked extractions and no claim. In the second test the first worker to have sent a few
requests is killed with SIGKILL: once the others finish, nothing is unfinished, and the only passages sent twice
are ones the killed worker held (its claims when it died: in flight, or answered and not yet stored). With named
workers ($ENGRAM_EXTRACT_WORKER) the others take its passages when its short lease lapses; unnamed ones are
"HOST pid PID", and the others see at once that the process is gone. Both run on a directory memory and on
PostgreSQL.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.errors import InputError
from fake_openai import FakeOpenAI, openie_handler, passage_of, task_of
from helpers import fake_llm_env
from pg_fixture import backend_place, pg_server  # noqa: F401
from rooms import Rooms

PASSAGES = 200
WORKERS = 4
MODELS = tuple(f"worker-{i}" for i in range(WORKERS))
LONG_LEASE = 90.0
DELAY = 0.05  # seconds the server takes per request: a worker alone would need about 5 s for all


def documents() -> list[Document]:
    return [
        Document(f"d{i:03d}", f"Item{i:03d} Harbor met Lyon on day {i}.", title=f"Doc{i:03d}") for i in range(PASSAGES)
    ]


def doc_of(request: dict[str, Any]) -> str:
    """The document id whose passage an extraction request carries ("Doc042\\nItem042 ..." -> "d042")."""
    return "d" + passage_of(request).split("\n", 1)[0].removeprefix("Doc")


def sent(server: FakeOpenAI, task: str) -> list[tuple[str, str]]:
    """(document id, model) of each `task` request ("ner" or "triples") the server received."""
    return [(doc_of(r), str(r["model"])) for r in list(server.requests) if task_of(r) == task]


def start_worker(where: str | Path, server: FakeOpenAI, model: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "engram.cli", "extract", "--memory", str(where), "--embedder", "hash"]
    command += ["--llm-model", model]
    full = {**fake_llm_env(server.base_url), **env}
    return subprocess.Popen(command, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def rows(where: str | Path, sql: str) -> list[tuple[Any, ...]]:
    """The rows of `sql` (over the memory's unqualified table names) on either backend."""
    if isinstance(where, Path):
        with sqlite3.connect(where / "engram.sqlite") as db:
            return [tuple(r) for r in db.execute(sql).fetchall()]
    import psycopg

    conninfo, schema = where.rsplit("?schema=", 1) if "?schema=" in where else where.rsplit("&schema=", 1)
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(f'SET search_path TO "{schema}"')
        cursor = db.execute(sql)
        return [tuple(r) for r in cursor.fetchall()] if cursor.description is not None else []


def pending_memory(where: str | Path) -> None:
    with Memory(where, embedder="hash", llm=False) as memory:
        assert memory.index(documents()).pending == PASSAGES


def assert_all_finished(where: str | Path) -> dict[str, str]:
    """Every passage done and in the graph (a fresh open counts none pending), no claim left; returns the
    model that made each document's extraction."""
    with Memory(where, embedder="hash", llm=False) as memory:
        stats = memory.stats()
        assert (stats["pending"], stats["failed"]) == (0, 0)
        model = {d.id: memory.phrases_of(d.id) for d in documents()}
        assert all(model.values())  # every passage has its phrases
    extractions = rows(where, "SELECT status, source, linked FROM extractions")
    assert len(extractions) == PASSAGES
    assert {(status, bool(linked)) for status, _, linked in extractions} == {("done", True)}
    assert rows(where, "SELECT * FROM claims") == []
    hashes = dict(rows(where, "SELECT id, content_hash FROM passages"))
    made = dict(rows(where, "SELECT content_hash, source FROM extractions"))
    return {pid: str(made[digest]).split(" ", 1)[0].removeprefix("openai:") for pid, digest in hashes.items()}


def finish(processes: list[subprocess.Popen[bytes]], within: float = 120.0) -> None:
    """Wait for `processes` to exit, `within` seconds for all; each must succeed. Any still running when the
    wait fails are killed."""
    deadline = time.monotonic() + within
    try:
        for process in processes:
            _, stderr = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
            assert process.returncode == 0, stderr.decode()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def kill_the_first_busy(workers: dict[str, subprocess.Popen[bytes]], server: FakeOpenAI) -> str:
    """SIGKILL the first worker to have sent 30 requests (in the middle of its work); returns its model. The
    others are stopped (SIGSTOP) first, so that what the killed one held can be read before any of them takes
    it over (a worker of this host takes a dead one's claims at once): `resume` lets them go on."""
    deadline = time.monotonic() + 60
    while True:
        counts = Counter(str(r["model"]) for r in list(server.requests))
        victim = next((m for m, n in counts.items() if n >= 30), None)
        assert all(p.poll() is None for p in workers.values()), "a worker finished before the kill"
        if victim is not None:
            for model, process in workers.items():
                if model != victim:
                    process.send_signal(signal.SIGSTOP)
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            return victim
        assert time.monotonic() < deadline, "extraction did not start"
        time.sleep(0.005)


def resume(workers: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in workers.values():
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)


@pytest.fixture(params=["directory", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return backend_place(request, tmp_path)


@pytest.fixture
def server() -> Any:
    fake = FakeOpenAI(models=MODELS).start()
    fake.handler = openie_handler(delay=DELAY)
    try:
        yield fake
    finally:
        fake.close()


def test_four_workers_extract_each_passage_once(place: Any, server: FakeOpenAI) -> None:
    where = place("shared")
    pending_memory(where)
    started = time.monotonic()
    finish([start_worker(where, server, model, {}) for model in MODELS])
    took = time.monotonic() - started
    ner, triples = sent(server, "ner"), sent(server, "triples")
    assert Counter(doc for doc, _ in ner) == {d.id: 1 for d in documents()}, "a passage was sent twice or never"
    assert Counter(doc for doc, _ in triples) == {d.id: 1 for d in documents()}
    assert len(server.requests) == 2 * PASSAGES
    by_worker = Counter(model for _, model in ner)
    assert len(by_worker) >= 2, f"the workers did not share the work: {by_worker} in {took:.1f} s"
    made = assert_all_finished(where)
    assert made == {doc: model for doc, model in ner}  # each extraction is the one its worker's request made


@pytest.mark.parametrize("named", [True, False], ids=["lease-lapses", "process-gone"])
def test_a_killed_worker_leaves_nothing_unfinished(place: Any, server: FakeOpenAI, named: bool) -> None:
    where = place("killed")
    pending_memory(where)
    # named: the others wait out its 4 s lease (renewed every 1.3 s while it lived); unnamed: a lease far
    # longer than the others may take to finish, so they must see that its process is gone
    env = {"ENGRAM_EXTRACT_LEASE": "4" if named else str(LONG_LEASE)}
    workers = {
        model: start_worker(where, server, model, {**env, **({"ENGRAM_EXTRACT_WORKER": model} if named else {})})
        for model in MODELS
    }
    try:
        victim = kill_the_first_busy(workers, server)
    except BaseException:
        finish(list(workers.values()), within=0.1)  # kills them all
        raise
    try:
        killed_at = len(server.requests)
        # what it held when it died, read while the others are stopped (its leases were renewed within 1.3 s)
        holder = f"{victim} " if named else f" pid {workers[victim].pid} "
        sql = "SELECT p.id, c.worker FROM claims c JOIN passages p ON p.content_hash = c.content_hash"
        leases = rows(where, sql)
        held = {pid for pid, worker in leases if (str(worker).startswith(holder) if named else holder in str(worker))}
    finally:
        resume(workers)
    finish([p for model, p in workers.items() if model != victim], within=120.0 if named else LONG_LEASE / 2)
    ner = sent(server, "ner")
    assert Counter(doc for doc, _ in ner).keys() == {d.id for d in documents()}
    survivors = Counter(doc for doc, model in ner if model != victim)
    assert max(survivors.values()) == 1, "the surviving workers sent a passage twice"
    by_victim = {doc for doc, model in ner if model == victim}
    twice = {doc for doc, n in Counter(doc for doc, _ in ner).items() if n > 1}
    made = assert_all_finished(where)
    assert twice <= by_victim  # a passage sent again was one the killed worker had sent ...
    assert all(made[doc] != victim for doc in twice)  # ... and not stored: someone else's extraction holds
    assert twice <= held, f"sent twice: {sorted(twice)}; the killed worker held {sorted(held)}"
    assert by_victim - twice, "the killed worker stored nothing before it was killed"
    assert killed_at < len(server.requests), "the others had finished everything before the kill"


def test_claims_by_content_hash_on_the_store(place: Any) -> None:
    """The store contract two workers meet: a limit per claim, others' unexpired leases held, a stored result
    releases its claim and is gone for the other worker, a lapsed lease is taken over, renewal and release."""
    with Rooms(place("store"), HashEmbedder()) as rooms:
        store = rooms.store
        hashes = [f"{i:064x}" for i in range(5)]
        wanted = [(h, 0) for h in hashes]
        first = store.claim_extractions("a", wanted, 3, 60.0)
        assert (first.taken, first.gone, first.held) == (hashes[:3], [], {})
        second = store.claim_extractions("b", wanted, 10, 60.0)
        assert second.taken == hashes[3:] and second.gone == []
        assert {h: w for h, (w, _) in second.held.items()} == dict.fromkeys(hashes[:3], "a")
        assert all(0 < left <= 60.0 for _, left in second.held.values())
        store.put_extractions([(hashes[0], ["X"], [], 0)], "test", claim="a")  # stored: a's claim goes with it
        store.put_failure(hashes[1], "scripted", "test", claim="a")
        again = store.claim_extractions("b", wanted[:3], 10, 60.0)
        assert (again.taken, sorted(again.gone), list(again.held)) == ([], hashes[:2], [hashes[2]])
        store.renew_claims("a", [hashes[2]], 0.0)  # a's lease ends now: as if a stopped renewing it
        time.sleep(0.05)
        taken = store.claim_extractions("b", wanted[2:3], 10, 60.0)
        assert (taken.taken, taken.held) == ([hashes[2]], {})
        store.renew_claims("a", [hashes[2]], 60.0)  # a lease taken over stays the new holder's
        assert store.claim_extractions("a", wanted[2:3], 10, 60.0).held[hashes[2]][0] == "b"
        store.release_claims("b", [hashes[3]])
        assert store.claim_extractions("a", wanted[3:4], 10, 60.0).taken == [hashes[3]]
        store.release_claims("a")
        store.release_claims("b")
    assert rows(place("store"), "SELECT * FROM claims") == []


def test_an_older_memory_gets_the_claims_table(place: Any, server: FakeOpenAI) -> None:
    where = place("older")
    with Memory(where, embedder="hash", llm=False) as memory:
        memory.index(documents()[:3])
    before = rows(where, "SELECT value FROM meta WHERE key = 'schema_version'")
    rows(where, "DROP TABLE claims")  # as a memory written before claims
    with Memory(where, embedder="hash", llm=server.chat(model=MODELS[0])) as memory:
        assert memory.extract().extracted == 3
    assert rows(where, "SELECT * FROM claims") == []
    assert rows(where, "SELECT value FROM meta WHERE key = 'schema_version'") == before  # no version change


def test_a_lease_that_is_not_a_number_of_seconds_is_refused(
    tmp_path: Path, server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(tmp_path / "m", embedder="hash", llm=server.chat(model=MODELS[0])) as memory:
        with pytest.raises(InputError, match="at least"):
            memory.extract(lease=0.1)
        monkeypatch.setenv("ENGRAM_EXTRACT_LEASE", "soon")
        with pytest.raises(InputError, match="ENGRAM_EXTRACT_LEASE"):
            memory.extract()
    assert server.attempts == 0
