"""Acceptance 2: index 200 passages with `engram index`, SIGKILL it about half way, run it again.

The re-run must send requests only for passages that were not finished at the kill, and the memory it
leaves must equal one built without a crash (records, extractions, graph statistics, retrieval results).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engram import Memory
from engram.ingest.sources import collect
from fake_openai import FakeOpenAI, openie_handler, passage_of
from helpers import fake_llm_env

PASSAGES = 200
QUERIES = ["Where did Person3 meet Word17?", "Who was in City2?", "P42 Word42", "Person5 in City0"]


def write_corpus(path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(PASSAGES):
            text = f"P{i} Word{i} meets Person{i % 7} in City{i % 5} on day {i}."
            out.write(json.dumps({"id": f"d{i:03d}", "title": f"Doc{i}", "text": text}) + "\n")


def engram_index(corpus: Path, memory: Path, server: FakeOpenAI) -> subprocess.Popen[bytes]:
    env = fake_llm_env(server.base_url)
    command = [sys.executable, "-m", "engram.cli", "index", str(corpus), "--memory", str(memory), "--embedder", "hash"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def done_passages(memory: Path) -> set[str]:
    """The passage tokens ("P17") of the passages whose extraction is committed as done."""
    database = memory / "engram.sqlite"
    if not database.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as db:
            rows = db.execute("SELECT entities FROM extractions WHERE status = 'done'").fetchall()
    except sqlite3.OperationalError:  # the table is not created yet
        return set()
    return {json.loads(entities)[0] for (entities,) in rows}


def passage_token(request: dict[str, Any]) -> str:
    return passage_of(request).split("\n", 1)[1].split()[0]


def records(memory: Path) -> dict[str, list[Any]]:
    with sqlite3.connect(memory / "engram.sqlite") as db:
        return {
            "documents": db.execute("SELECT id, title, metadata, content_hash FROM documents ORDER BY id").fetchall(),
            "passages": db.execute("SELECT * FROM passages ORDER BY id").fetchall(),
            "chunks": db.execute("SELECT * FROM chunks ORDER BY doc_id, idx").fetchall(),
            "extractions": db.execute(
                "SELECT content_hash, status, entities, triples, dropped, source FROM extractions ORDER BY 1"
            ).fetchall(),
        }


def snapshot(memory: Path) -> dict[str, Any]:
    with Memory(memory, embedder="hash") as m:
        stats = {k: v for k, v in m.stats().items() if k != "llm"}
        results = [
            [(p.id, round(p.score, 6)) for p in r.passages] for r in m.retrieve(QUERIES, top_k=5)
        ]
    return {"stats": stats, "retrieval": results, "records": records(memory)}


def test_sigkill_half_way_then_rerun_sends_only_unfinished_work(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler(delay=0.02)
    corpus, crashed = tmp_path / "corpus.jsonl", tmp_path / "crashed"
    write_corpus(corpus)

    process = engram_index(corpus, crashed, fake_llm)
    deadline = time.monotonic() + 60
    while len(done_passages(crashed)) < PASSAGES // 2:
        assert process.poll() is None, f"finished before the kill: {process.stderr.read() if process.stderr else ''}"
        assert time.monotonic() < deadline, "extraction did not progress"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(0.3)  # requests sent just before the kill reach the server's log
    finished = done_passages(crashed)
    assert PASSAGES // 2 <= len(finished) < PASSAGES
    first_run = fake_llm.attempts

    rerun = engram_index(corpus, crashed, fake_llm)
    _, stderr = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, stderr.decode()
    second = fake_llm.requests[first_run:]
    sent_for = {passage_token(r) for r in second}
    assert not sent_for & finished, "the re-run asked again for finished passages"
    assert len(second) <= 2 * (PASSAGES - len(finished))
    assert sent_for  # the unfinished half was completed by the re-run
    assert len(done_passages(crashed)) == PASSAGES

    reference = tmp_path / "reference"
    clean = engram_index(corpus, reference, fake_llm)
    _, stderr = clean.communicate(timeout=120)
    assert clean.returncode == 0, stderr.decode()
    assert snapshot(crashed) == snapshot(reference)


def test_rerun_of_a_finished_index_makes_no_call(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler()
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus)
    docs = collect([str(corpus)]).documents[:20]
    with Memory(tmp_path / "m", embedder="hash", llm=fake_llm.chat()) as m:
        assert m.index(docs).extracted == 20
    calls = fake_llm.attempts
    assert calls == 40
    with Memory(tmp_path / "m", embedder="hash", llm=fake_llm.chat()) as m:
        report = m.index(docs)
        assert report.unchanged == 20 and report.extracted == 0
        extra = m.extract()
        assert extra.extracted == 0
    assert fake_llm.attempts == calls
