"""Extractions remember who made them (model identity + prompt version): a memory extracted with one model and
reopened with another re-extracts with `extract --redo other`; `--redo all` asks the model again instead of
replaying the response cache; old memories are migrated (issue 10, defect 14)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from engram import Memory
from engram.cli import main
from engram.embed import HashEmbedder
from engram.errors import InputError, MemoryFormatError
from engram.extract.openie import PROMPT_VERSION
from fake_openai import FakeOpenAI, openie_answer, task_of
from helpers import DOCS

MODELS = ("model-a", "model-b")


def by_model(request: dict[str, Any]) -> str | None:
    """model-a: the usual chained triples; model-b: one fact per passage, linking its first entity to "Model B"."""
    answer = openie_answer(request)
    if answer is None or request.get("model") != "model-b" or task_of(request) != "triples":
        return answer
    first = json.loads(answer)["triples"]
    subject = first[0][0] if first else "nothing"
    return json.dumps({"triples": [[subject, "is checked by", "Model B"]]})


def sources(path: Path) -> set[str]:
    with sqlite3.connect(path / "engram.sqlite") as db:
        return {str(r[0]) for r in db.execute("SELECT source FROM extractions")}


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER", "ENGRAM_EXTRACTOR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server(fake_llm: FakeOpenAI) -> FakeOpenAI:
    fake_llm.models = MODELS
    fake_llm.handler = by_model
    return fake_llm


def build(path: Path, server: FakeOpenAI) -> None:
    with Memory(path, embedder=HashEmbedder(), llm=server.chat(model="model-a")) as memory:
        assert memory.index(DOCS).extracted == len(DOCS)


def test_redo_other_reextracts_with_the_new_model(tmp_path: Path, server: FakeOpenAI) -> None:
    build(tmp_path / "m", server)
    assert sources(tmp_path / "m") == {f"openai:model-a {PROMPT_VERSION}"}
    sent = server.attempts
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=server.chat(model="model-b")) as memory:
        before = {d.id: memory.phrases_of(d.id) for d in DOCS}
        assert memory.extract().extracted == 0 and server.attempts == sent  # plain extract: nothing to do
        report = memory.extract(redo="other")
        assert (report.extracted, report.failed) == (len(DOCS), 0)
        new = server.requests[sent:]
        assert len(new) == 2 * len(DOCS) and {r["model"] for r in new} == {"model-b"}
        for doc in DOCS:  # the graph holds model-b's facts now, not model-a's
            assert "model b" in memory.phrases_of(doc.id) and "model b" not in before[doc.id]
        assert memory.stats()["facts"] == len(DOCS)
        assert memory.extract(redo="other").extracted == 0  # all made by model-b now
    assert sources(tmp_path / "m") == {f"openai:model-b {PROMPT_VERSION}"}


def test_redo_all_asks_the_model_again(tmp_path: Path, server: FakeOpenAI) -> None:
    build(tmp_path / "m", server)
    sent = server.attempts
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=server.chat(model="model-a")) as memory:
        assert memory.extract(redo="other").extracted == 0 and server.attempts == sent
        report = memory.extract(redo="all")
        assert report.extracted == len(DOCS) and report.llm.get("cache_hits", 0) == 0
        assert server.attempts == sent + 2 * len(DOCS)  # the cached replies were not replayed
        with pytest.raises(InputError, match="unknown redo"):
            memory.extract(redo="everything")


def test_a_failed_reextraction_keeps_the_old_triples(tmp_path: Path, server: FakeOpenAI) -> None:
    build(tmp_path / "m", server)
    server.handler = lambda request: "not json at all"
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=server.chat(model="model-b")) as memory:
        facts = memory.stats()["facts"]
        report = memory.extract(redo="other")
        assert (report.extracted, report.failed) == (0, len(DOCS))
        assert memory.stats()["facts"] == facts and memory.stats()["failed"] == 0
    assert sources(tmp_path / "m") == {f"openai:model-a {PROMPT_VERSION}"}


def test_cli_extract_redo_other(tmp_path: Path, server: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    build(tmp_path / "m", server)
    sent = server.attempts
    args = ["extract", "--memory", str(tmp_path / "m"), "--embedder", "hash", "--llm-base-url", server.base_url]
    assert main([*args, "--llm-model", "model-b"]) == 0
    assert server.attempts == sent  # without --redo nothing is re-extracted
    assert main([*args, "--llm-model", "model-b", "--redo", "other"]) == 0
    assert "extracted 5 passages" in capsys.readouterr().err
    assert {r["model"] for r in server.requests[sent:]} == {"model-b"} and server.attempts == sent + 10


def test_old_memories_get_the_prompt_version(tmp_path: Path, server: FakeOpenAI) -> None:
    build(tmp_path / "m", server)
    with sqlite3.connect(tmp_path / "m" / "engram.sqlite") as db:  # as schema version 1 wrote them
        db.execute("UPDATE extractions SET source = 'openai:model-a' WHERE content_hash IN "
                   "(SELECT content_hash FROM extractions LIMIT 4)")  # fmt: skip
        db.execute("UPDATE extractions SET source = 'import:openie.jsonl' WHERE source LIKE 'openai:% %'")
        db.execute("DELETE FROM meta WHERE key = 'schema_version'")
    sent = server.attempts
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=server.chat(model="model-a")) as memory:
        report = memory.extract(redo="other")  # the import only; model-a's replies to it are cached
        assert report.extracted == 1 and report.llm["cache_hits"] == 2 and server.attempts == sent
    assert sources(tmp_path / "m") == {f"openai:model-a {PROMPT_VERSION}"}
    with sqlite3.connect(tmp_path / "m" / "engram.sqlite") as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(MemoryFormatError, match="upgrade engram"):
        Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False)
