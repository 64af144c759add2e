"""Issue 52, item 9: the library, the CLI, REST and MCP say the same things the same way."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from engram.cli import main
from engram.embed import HashEmbedder
from fake_openai import FakeOpenAI, reply
from helpers import DOCS, EXTRACTIONS

HASH = ["--embedder", "hash"]


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER", "ENGRAM_EXTRACTOR"):
        monkeypatch.delenv(name, raising=False)


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.skipif(importlib.util.find_spec("spacy") is None, reason="needs the nlp extra")
def test_a_memory_remembers_its_extractor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mem = str(tmp_path / "m")
    first = write(tmp_path / "a.md", "Marie Curie was born in Warsaw.")
    assert main(["index", first, "-m", mem, *HASH, "--extractor", "spacy"]) == 0
    second = write(tmp_path / "b.md", "Pierre Curie worked in Paris.")
    assert main(["index", second, "-m", mem]) == 0  # no --extractor: the one the memory was built with
    assert "extractions: 0 imported, 1 extracted" in capsys.readouterr().err
    with Memory(mem, llm=False) as memory:
        assert memory.extractor == "spacy" and memory.stats()["extractor"] == "spacy"
        assert memory.stats()["pending"] == 0 and "paris" in memory.phrases_of("b.md")
    with Memory(mem, llm=False, extractor="llm") as memory:  # a choice given wins, and is remembered
        memory.index([Document("c", "Nothing extracts this one.")])
        assert memory.stats()["pending"] == 1
    with Memory(mem, llm=False) as memory:
        assert memory.extractor == "llm"


def test_a_new_memory_without_a_choice_uses_the_llm_extractor(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        assert memory.extractor == "llm"
        memory.index([Document("a", "Some text.")])
    with Memory(tmp_path / "m", llm=False) as memory:
        assert memory.extractor == "llm" and memory.stats()["pending"] == 1


def test_stats_takes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mem = str(tmp_path / "m")
    assert main(["index", write(tmp_path / "a.md", "Alpha lives here."), "-m", mem, *HASH]) == 0
    capsys.readouterr()
    assert main(["stats", "-m", mem, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 1


def test_retrieve_and_ask_rows_carry_the_question_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mem = tmp_path / "m"
    with Memory(mem, embedder=HashEmbedder(), llm=False) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
    rows = [{"id": "q-lyon", "question": "Which river is Lyon on?"}, {"id": "q-oslo", "question": "What is Oslo?"}]
    questions = write(tmp_path / "q.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    args = ["-m", str(mem), "--questions", questions, "--json", "--method", "dense"]
    assert main(["retrieve", "Who founded Acme Tools?", *args]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r.get("id") for r in printed] == [None, "q-lyon", "q-oslo"]  # a typed question has no id
    assert [r["query"] for r in printed[1:]] == [r["question"] for r in rows]
    assert main(["retrieve", *args, "--segments"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ["q-lyon", "q-oslo"]


def test_retrieval_says_whether_it_fell_back_as_rest_and_mcp_do(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        memory.index([Document("a", "Alice lives in Lyon.")])  # no facts: hipporag2 falls back to dense
        graph = memory.retrieve("Where does Alice live?", method="hipporag2")[0]
        dense = memory.retrieve("Where does Alice live?", method="dense")[0]
    assert graph.fell_back is True and graph.fallback_reason
    assert dense.fell_back is False and not dense.fallback_reason


def test_a_run_where_every_passage_failed_does_not_exit_0(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_llm.handler = lambda request: reply("no JSON here, ever")
    mem = str(tmp_path / "m")
    llm = ["--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model"]
    notes = write(tmp_path / "notes" / "a.md", "Alice lives in Lyon.")
    write(tmp_path / "notes" / "b.md", "Bob lives in Oslo.")
    assert main(["index", str(Path(notes).parent), "-m", mem, *HASH, *llm]) == 3
    err = capsys.readouterr().err
    assert "every passage this run tried (2) failed extraction" in err
    assert main(["extract", "-m", mem, *llm]) == 3  # the retry failed again, every passage of it


def test_a_run_with_some_failures_still_exits_0_without_strict(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    from fake_openai import openie_answer

    def handler(request: dict[str, Any]) -> Any:
        prompt = json.dumps(request)
        answer = openie_answer(request)
        return reply("no JSON" if "Oslo" in prompt or answer is None else answer)

    fake_llm.handler = handler
    mem = str(tmp_path / "m")
    llm = ["--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model"]
    notes = tmp_path / "notes"
    write(notes / "a.md", "Alice lives in Lyon.")
    write(notes / "b.md", "Bob lives in Oslo.")
    assert main(["index", str(notes), "-m", mem, *HASH, *llm]) == 0
    assert "every passage" not in capsys.readouterr().err
    assert main(["index", str(notes), "-m", mem, *llm, "--strict"]) == 3  # --strict: any failure is 3


# --- REST and MCP ---------------------------------------------------------------------------------------


def test_rest_delete_lists_what_it_deleted(tmp_path: Path) -> None:
    pytest.importorskip("fastapi", reason="the server extra is not installed")
    from server_helpers import hash_settings, serve

    with serve(hash_settings(root=tmp_path / "root")) as server, server.client() as http:
        url = "/v1/memories/notes"
        http.post(f"{url}/documents", json={"documents": [{"id": "a", "text": "Alice."}, {"id": "b", "text": "B."}]})
        deleted = http.delete(f"{url}/documents/a").json()
        assert deleted["report"]["deleted"] == ["a"] and deleted["report"]["documents"] == 1
        found = http.post(f"{url}/retrieve", json={"query": "Alice", "method": "hipporag2"}).json()["results"][0]
        assert found["fell_back"] is True and found["fallback_reason"]


def test_mcp_uses_rest_names_and_writes_answer_briefly(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the server extra is not installed")
    import anyio
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from server_helpers import hash_settings, serve

    def text(result: Any) -> str:
        return " ".join(getattr(block, "text", "") for block in result.content)

    with serve(hash_settings(root=tmp_path / "root")) as server:

        async def run() -> list[Any]:
            http = httpx2.AsyncClient(timeout=60)
            async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
                return [
                    await client.call_tool("remember", {"text": "Alice lives in Lyon.", "id": "a"}),
                    await client.call_tool("remember", {"text": "Alice lives in Lyon.", "id": "a"}),
                    await client.call_tool("answer", {"query": "Where does Alice live?", "method": "dense"}),
                    await client.call_tool("answer", {"question": "Where does Alice live?"}),
                    await client.call_tool("forget", {"document_id": "a"}),
                ]

        added, again, answered, old_name, forgot = anyio.run(run)
    assert added.structured_content == {"added": ["a"], "updated": [], "unchanged": 0, "skipped": {}, "failed": 0}
    assert again.structured_content == {"added": [], "updated": [], "unchanged": 1, "skipped": {}, "failed": 0}
    assert answered.is_error and "llm_unavailable" in text(answered)  # took `query`; no LLM on this server
    assert old_name.is_error and "question" in text(old_name) and "Extra inputs" in text(old_name)
    assert forgot.structured_content == {"deleted": ["a"]}
    assert len(json.dumps(added.structured_content)) < 120  # no timings, no stats


@pytest.mark.skipif(importlib.util.find_spec("spacy") is None, reason="needs the nlp extra")
def test_extract_runs_the_llm_on_a_memory_built_with_spacy(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    from fake_openai import openie_answer

    fake_llm.handler = lambda request: reply(openie_answer(request) or "{}")
    mem = str(tmp_path / "m")
    assert main(["index", write(tmp_path / "a.md", "Marie Curie was born in Warsaw."), "-m", mem, *HASH,
                 "--extractor", "spacy"]) == 0  # fmt: skip
    llm = ["--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model"]
    assert main(["extract", "-m", mem, *llm, "--redo", "other"]) == 0  # not "configure one (and not spacy)"
    assert "extracted 1 passages" in capsys.readouterr().err
    with Memory(mem, llm=False) as memory:
        assert memory.extractor == "llm"  # the memory is the LLM's now: the next index extracts with it
