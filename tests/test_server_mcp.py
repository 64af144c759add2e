"""MCP through the official SDK's own client: over stdio (`engram mcp` in a subprocess) and over streamable
HTTP (/mcp on the real server). Lists the tools, calls each, and checks that `recall` returns the passages
`engram retrieve --json` prints."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from engram.cli import main
from engram.server.settings import parse_key_entries
from fake_openai import FakeOpenAI, openie_answer, reply, task_of
from server_helpers import hash_settings, seeded_memory, serve

TOOLS = {"remember", "recall", "answer", "forget", "list_memories", "stats", "list_documents"}
QUERY = "Where was the founder of Acme Tools born?"
FULL, READER = "mcp-full-key-0123456789", "mcp-reader-key-0123456789"


def cli_retrieve(capsys: pytest.CaptureFixture[str], path: Path, *llm: str) -> list[tuple[str, float]]:
    capsys.readouterr()
    assert main(["retrieve", "--memory", str(path), "--embedder", "hash", "--json", "--top-k", "3", *llm, QUERY]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    return [(p["id"], p["score"]) for p in row["passages"]]


def data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    found = result.structured_content
    assert isinstance(found, dict)
    return found


def error_text(result: Any) -> str:
    assert result.is_error
    return " ".join(getattr(block, "text", "") for block in result.content)


async def exercise(client: Client, expected: list[tuple[str, float]]) -> dict[str, Any]:
    """Every tool once (twice for recall); returns what the answer tool said (or its error)."""
    listed = await client.list_tools()
    assert {t.name for t in listed.tools} >= TOOLS
    assert all(len(t.description or "") > 80 for t in listed.tools if t.name in TOOLS)  # written for an agent
    assert data(await client.call_tool("list_memories", {}))["memories"] == ["default"]
    assert data(await client.call_tool("stats", {}))["stats"]["documents"] == 5
    recalled = data(await client.call_tool("recall", {"query": QUERY, "top_k": 3}))
    assert [(p["id"], p["score"]) for p in recalled["passages"]] == expected
    assert recalled["seeds"] and recalled["candidate_facts"]  # the why comes along
    note = {"text": "Marie Curie discovered polonium in Paris.", "id": "curie", "title": "Curie"}
    assert data(await client.call_tool("remember", note))["added"] == ["curie"]
    again = data(await client.call_tool("recall", {"query": "Who discovered polonium?", "top_k": 1}))
    assert again["passages"][0]["id"] == "curie"
    assert [d["id"] for d in data(await client.call_tool("list_documents", {"prefix": "cu"}))["documents"]] == ["curie"]
    assert data(await client.call_tool("forget", {"document_id": "curie"})) == {"deleted": ["curie"]}
    assert "not_found" in error_text(await client.call_tool("forget", {"document_id": "curie"}))
    assert "bad_input" in error_text(await client.call_tool("stats", {"memory": "../x"}))
    answered = await client.call_tool("answer", {"query": "Where was Alice Moreau born?"})
    return {"error": error_text(answered)} if answered.is_error else data(answered)


def test_mcp_over_stdio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = seeded_memory(tmp_path / "m")
    expected = cli_retrieve(capsys, path)
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1", "ENGRAM_EMBEDDER": ""}
    code = "import sys; from engram.cli import main; sys.exit(main())"
    params = StdioServerParameters(
        command=sys.executable, args=["-c", code, "mcp", "--memory", str(path), "--embedder", "hash"], env=env
    )

    async def run() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=60) as client:
            return await exercise(client, expected)

    answered = anyio.run(run)
    assert "llm_unavailable" in answered["error"]  # no LLM configured: the agent is told to use recall


def scripted(request: dict[str, Any]) -> Any:
    """OpenIE by content; an unreadable filter reply (the filter is skipped, every candidate kept); Lyon."""
    answer = openie_answer(request)
    if answer is not None:
        return reply(answer)
    return reply("not json" if task_of(request) == "filter" else "Answer: Lyon")


def test_mcp_over_http_with_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = scripted
    path = seeded_memory(tmp_path / "m")
    llm = ["--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model"]
    expected = cli_retrieve(capsys, path, *llm)
    keys = parse_key_entries(f"{FULL}\n{READER} read-only", "test")
    settings = hash_settings(memory=path, keys=keys, llm_base_url=fake_llm.base_url, llm_model="fake-model")
    with serve(settings) as server:
        url = f"{server.url}/mcp"

        def connect(key: str | None) -> Client:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            http = httpx2.AsyncClient(headers=headers, timeout=60)
            return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60)

        async def run() -> dict[str, Any]:
            async with connect(READER) as reader:
                assert "forbidden" in error_text(await reader.call_tool("remember", {"text": "x" * 20}))
                assert data(await reader.call_tool("recall", {"query": QUERY, "top_k": 3}))["passages"]
            async with connect(FULL) as client:
                return await exercise(client, expected)

        assert anyio.run(run)["answer"] == "Lyon"
        with httpx2.Client() as plain:
            refused = plain.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "unauthorized"


def test_mcp_remember_says_why_metadata_is_refused_and_recall_takes_a_method(tmp_path: Path) -> None:
    import anyio
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    with serve(hash_settings(root=tmp_path / "root")) as server:

        async def run() -> tuple[str, str]:
            http = httpx2.AsyncClient(timeout=60)
            async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
                result = await client.call_tool("remember", {"documents": [{"id": "x", "text": "t", "metadata": "x"}]})
                assert result.is_error
                refused = " ".join(getattr(block, "text", "") for block in result.content)
                assert not (await client.call_tool("remember", {"text": "Alice lives in Lyon.", "id": "a"})).is_error
                found = await client.call_tool("recall", {"query": "Where does Alice live?", "method": "dense"})
                assert found.structured_content is not None
                return refused, found.structured_content["requested_method"]

        refused, method = anyio.run(run)
        assert "metadata must be an object" in refused and method == "dense"  # recall takes a method, as REST does
