"""Accounting (`engram stats`), the response cache across runs and processes, `--dry-run`, the token budget
`--max-tokens` and chunking to `--max-input-tokens`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from engram.cli import main
from engram.embed import HashEmbedder
from engram.errors import InputError
from engram.tokens import message_tokens
from fake_openai import FakeOpenAI, Spec, openie_answer, openie_handler, reply, task_of

DOCS = [Document(f"d{i}", f"Item{i} was made by Maker{i % 3} in Town{i % 4}.", title=f"T{i}") for i in range(12)]


@pytest.fixture
def llm_env(fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    monkeypatch.setenv("ENGRAM_LLM_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("ENGRAM_LLM_MODEL", "fake-model")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("ENGRAM_EMBEDDER", raising=False)
    fake_llm.handler = openie_handler()
    return fake_llm


def corpus_file(folder: Path, docs: list[Document] = DOCS) -> Path:
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in docs))
    return path


def test_stats_show_calls_tokens_hits_retries_and_failures(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    def handler(request: dict[str, Any]) -> Spec | str | None:
        if task_of(request) == "triples" and "Item3 " in json.dumps(request["messages"]):
            return "not json"  # this passage fails at its second step; its first reply stays cached
        return openie_answer(request)

    fake_llm.handler = handler
    fake_llm.push(Spec(status=503))
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:
        report = m.index(DOCS[:4])
        assert report.extracted == 3 and report.failed == 1
        assert report.llm["calls"] == 9 and report.llm["retries"] == 1 and report.llm["tokens"] > 0
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:  # a new process, in effect
        again = m.extract()
        assert again.failed == 1 and again.llm["cache_hits"] == 1 and again.llm["calls"] == 2
        llm = m.stats()["llm"]
    total = llm["total"]
    assert total["calls"] == 11 and total["cache_hits"] == 1 and total["retries"] == 1 and total["failures"] == 0
    assert total["prompt_tokens"] > 0 and total["completion_tokens"] > 0
    assert set(llm["models"]) == {"openai:fake-model"}
    assert llm["cached_responses"] == 7  # 3 passages x 2, and the failed passage's first step


def test_stats_command_prints_the_llm_section(llm_env: FakeOpenAI, tmp_path: Path, capsys: Any) -> None:
    corpus, mem = corpus_file(tmp_path), str(tmp_path / "m")
    assert main(["index", str(corpus), "--memory", mem, "--embedder", "hash"]) == 0
    err = capsys.readouterr().err
    assert "LLM: 24 calls" in err and "0 cache hits" in err
    assert main(["stats", "--memory", mem, "--embedder", "hash"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["llm"]["total"]["calls"] == 24 and stats["llm"]["cached_responses"] == 24


def test_dry_run_estimates_without_calling_or_writing(llm_env: FakeOpenAI, tmp_path: Path, capsys: Any) -> None:
    corpus, mem = corpus_file(tmp_path), tmp_path / "m"
    assert main(["index", str(corpus), "--memory", str(mem), "--embedder", "hash", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "12 passages to extract, 24 LLM requests" in out and "0 requests answered from the cache" in out
    assert llm_env.attempts == 0 and not mem.exists()


def test_estimate_is_close_to_what_is_sent(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler()
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:
        estimate = m.estimate(DOCS)
        assert (estimate.passages, estimate.calls, estimate.cached_calls) == (12, 24, 0)
        m.index(DOCS)
        assert m.estimate(DOCS).calls == 0 and m.estimate().passages == 0
    sent = sum(message_tokens(r["messages"]) for r in fake_llm.requests)
    assert 0.8 * sent <= estimate.input_tokens <= 1.25 * sent


def test_estimate_counts_cached_first_steps(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = lambda r: "garbage" if task_of(r) == "triples" else openie_answer(r)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:
        assert m.index(DOCS[:3]).failed == 3
        estimate = m.estimate()
    assert (estimate.passages, estimate.calls, estimate.cached_calls) == (3, 3, 3)


def test_budget_stops_cleanly_and_a_rerun_resumes(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler()
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:
        report = m.index(DOCS, max_tokens=1)
        assert report.budget_reached and report.extracted == 1 and report.pending == 11
        assert m.stats()["documents"] == 12  # everything is indexed; dense and BM25 find the pending ones
        assert fake_llm.attempts == 2
        assert m.retrieve("Item5", method="bm25")[0].passages[0].id == "d5"
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:
        resumed = m.index(DOCS)
        assert resumed.unchanged == 12 and resumed.extracted == 11 and not resumed.budget_reached
        assert resumed.pending == 0
    assert fake_llm.attempts == 24  # each passage's requests were sent exactly once


def test_budget_bounds_the_overshoot(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler(delay=0.01)
    chat = fake_llm.chat(max_concurrency=2)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=chat) as m:
        per_passage = m.index(DOCS[:1]).llm["tokens"]
        report = m.extract()  # nothing to do
        assert report.extracted == 0
        budget = 3 * per_passage
        report = m.index(DOCS[1:], max_tokens=budget)
    assert report.budget_reached and 3 <= report.extracted < 11
    window = 2 + 2  # concurrency + slack: at most that many passages were in flight at the stop
    assert report.llm["tokens"] <= budget + window * per_passage * 1.2


def test_cli_max_tokens_then_resume(llm_env: FakeOpenAI, tmp_path: Path, capsys: Any) -> None:
    corpus, mem = corpus_file(tmp_path), str(tmp_path / "m")
    assert main(["index", str(corpus), "--memory", mem, "--embedder", "hash", "--max-tokens", "1"]) == 0
    assert "stopped at the token budget" in capsys.readouterr().err
    assert main(["extract", "--memory", mem, "--embedder", "hash", "--dry-run"]) == 0
    assert "11 passages to extract, 22 LLM requests" in capsys.readouterr().out
    assert main(["extract", "--memory", mem, "--embedder", "hash"]) == 0
    assert "extracted 11 passages, 0 failed" in capsys.readouterr().err
    assert llm_env.attempts == 24


def test_max_input_tokens_chunks_so_every_prompt_fits(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = openie_handler()
    words = " ".join(f"word{i} and some lowercase filler text" for i in range(400))
    doc = Document("long", "Ada Lovelace " + words, title="Long")
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:
        report = m.index([doc], max_input_tokens=800)
        assert report.passages > 1 and report.failed == 0
    assert max(message_tokens(r["messages"]) for r in fake_llm.requests) <= 800
    with Memory(tmp_path / "small", embedder=HashEmbedder()) as m, pytest.raises(InputError, match="at least"):
        m.index([doc], max_input_tokens=100)


def test_two_processes_share_one_response_cache(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    fake_llm.handler = lambda request: reply(f"echo {request['messages'][-1]['content']}", delay=0.005)
    (tmp_path / "m").mkdir()
    script = f"""
import sys
from pathlib import Path
from engram.llm import OpenAIChat
from engram.llm.cache import CachedChat
from engram.store.records import RecordStore
store = RecordStore(Path({str(tmp_path / "m" / "engram.sqlite")!r}))
chat = CachedChat(OpenAIChat("fake-model", base_url={fake_llm.base_url!r}, api_key="k"), store)
for i in range(40):
    assert chat.complete([{{"role": "user", "content": f"q{{i}}"}}]) == f"echo q{{i}}"
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    workers = [subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE) for _ in range(2)]
    for worker in workers:
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err.decode()
    assert 40 <= fake_llm.attempts <= 80  # both may ask for a key before either stored it, never more
    before = fake_llm.attempts
    rerun = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert fake_llm.attempts == before  # everything came from the cache


def test_filter_and_reader_calls_are_accounted(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    def handler(request: dict[str, Any]) -> str | None:
        task = task_of(request)
        if task == "filter":
            return json.dumps({"facts": []})
        return "Answer: Maker1" if task == "reader" else openie_answer(request)

    fake_llm.handler = handler
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:
        m.index(DOCS[:3])
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as m:
        assert m.answer("Who made Item1?")[0].answer == "Maker1"
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as m:
        assert m.stats()["llm"]["total"]["calls"] == fake_llm.attempts
