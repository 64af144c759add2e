"""Issue 52, item 3: input that used to be changed without a word is kept exactly or refused with a message
naming the fix, through the library, the CLI, REST and MCP."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from engram import Document, InputError, Memory
from engram.embed import HashEmbedder
from engram.ingest.sources import read_text_file
from helpers import cli_refused

HASH = ["--embedder", "hash"]


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER", "ENGRAM_EXTRACTOR"):
        monkeypatch.delenv(name, raising=False)


def test_a_lone_surrogate_in_document_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        with pytest.raises(InputError, match=r"text of document 'a' holds a lone surrogate \(U\+D800\)"):
            memory.index([Document("a", "Hello \ud800 world")])
        assert memory.stats()["documents"] == 0
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "b", "text": "Bye \udfff now"}) + "\n", encoding="utf-8")
    assert "lone surrogate" in cli_refused(capsys, ["index", str(corpus), "-m", str(tmp_path / "m"), *HASH])


def test_format_characters_and_line_ends_in_text_are_kept(tmp_path: Path) -> None:
    """U+FEFF, zero-width (non-)joiners and bidi marks are text (emoji sequences, Persian, Hebrew): kept as
    given. CR LF and a lone CR become LF (a line end either way); NFC is applied."""
    texts = {
        "feff": "Zero\ufeffwidth no-break space inside a word.",
        "emoji": "The developer \U0001f469\u200d\U0001f4bb wrote it.",
        "zwnj": "Persian \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 keeps its non-joiner.",
        "bidi": "Shalom \u200f\u05e9\u05dc\u05d5\u05dd\u200e and a soft\u00adhyphen.",
    }
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        memory.index([Document(k, t) for k, t in texts.items()] + [Document("lines", "one\r\ntwo\rthree\x07")])
        stored = {p.id: p.text for p in memory.retrieve("text", top_k=10, method="dense")[0].passages}
    assert {k: stored[k] for k in texts} == texts
    assert stored["lines"] == "one\ntwo\nthree"  # a lone CR is a line end too, not nothing; BEL is dropped
    bom = tmp_path / "bom.md"
    bom.write_bytes("\ufeffTitle\ufeffinside".encode())
    assert read_text_file(bom) == "Title\ufeffinside"  # the byte-order mark of a UTF-8 file goes, text stays


def test_nan_and_infinity_in_metadata_are_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        for value in (float("nan"), float("inf"), [1.0, float("-inf")]):
            with pytest.raises(InputError, match="NaN or Infinity, which JSON cannot store"):
                memory.index([Document("a", "Some text.", metadata={"score": value})])
        assert memory.stats()["documents"] == 0


def test_a_url_of_another_database_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("mysql://x/y", "sqlite:///tmp/m", "redis://localhost/0"):
        with pytest.raises(InputError, match=r"is not a store engram supports.*postgresql://"):
            Memory(url, embedder=HashEmbedder(), llm=False)
        assert "postgresql://" in cli_refused(capsys, ["index", str(Path(__file__)), "-m", url, *HASH])
        assert "postgresql://" in cli_refused(capsys, ["stats", "-m", url])
    assert os.listdir(tmp_path) == []  # no directory mysql:/x/y, sqlite:/tmp/m, ...


# --- REST ---------------------------------------------------------------------------------------------


def rest(tmp_path: Path, docs: bool = False) -> Any:
    pytest.importorskip("fastapi", reason="the server extra is not installed")
    from server_helpers import hash_settings, serve

    return serve(hash_settings(root=tmp_path / "root", docs=docs))


def post(http: Any, path: str, body: str) -> Any:
    return http.post(path, content=body, headers={"content-type": "application/json"})


def test_rest_refuses_numbers_and_flags_given_as_other_types(tmp_path: Path) -> None:
    from server_helpers import error_of

    url = "/v1/memories/notes"
    with rest(tmp_path) as server, server.client() as http:
        assert http.post(f"{url}/documents", json={"documents": [{"id": "a", "text": "Alice lives in Lyon."}]})
        for body, field in (
            ({"query": "Where?", "top_k": "5"}, "top_k"),
            ({"query": "Where?", "top_k": True}, "top_k"),
            ({"query": "Where?", "top_k": 2.0}, "top_k"),
        ):
            response = http.post(f"{url}/retrieve", json=body)
            assert error_of(response) == (400, "bad_input"), body
            assert field in response.json()["error"]["message"]
        answer = http.post(f"{url}/answer", json={"query": "Where?", "stream": "yes"})
        assert error_of(answer) == (400, "bad_input") and "stream" in answer.text
        document = {"id": "b", "text": "Bob lives in Oslo."}
        for path, body in (
            (f"{url}/documents", {"documents": [document], "wait": "yes"}),
            (f"{url}/documents", {"documents": [document], "wait": 1}),
        ):
            response = http.post(path, json=body)
            assert error_of(response) == (400, "bad_input") and "wait" in response.text
        response = http.put(f"{url}/documents/b", json={"text": "Bob.", "wait": "true"})
        assert error_of(response) == (400, "bad_input") and "wait" in response.text
        assert http.get(url).json()["stats"]["documents"] == 1  # nothing refused was written
        assert http.post(f"{url}/retrieve", json={"query": "Where?", "top_k": 1}).status_code == 200


def test_rest_refuses_query_and_queries_together(tmp_path: Path) -> None:
    from server_helpers import error_of

    url = "/v1/memories/notes"
    with rest(tmp_path) as server, server.client() as http:
        http.post(f"{url}/documents", json={"documents": [{"id": "a", "text": "Alice lives in Lyon."}]})
        for route in ("retrieve", "answer"):
            response = http.post(f"{url}/{route}", json={"query": "Where?", "queries": ["Who?", "When?"]})
            assert error_of(response) == (400, "bad_input")
            assert '"query" (one question) or "queries"' in response.json()["error"]["message"]
        both = http.post(f"{url}/retrieve", json={"queries": ["Who?", "When?"]}).json()
        assert [r["query"] for r in both["results"]] == ["Who?", "When?"]


def test_rest_refuses_nan_in_metadata(tmp_path: Path) -> None:
    from server_helpers import error_of

    url = "/v1/memories/notes"
    with rest(tmp_path) as server, server.client() as http:
        body = '{"documents": [{"id": "a", "text": "Alice.", "metadata": {"score": NaN}}]}'
        response = post(http, f"{url}/documents", body)
        assert error_of(response) == (400, "bad_input") and "NaN" in response.json()["error"]["message"]
        put = http.put(
            f"{url}/documents/a", content='{"text": "A.", "metadata": {"x": Infinity}}',
            headers={"content-type": "application/json"},
        )
        assert error_of(put) == (400, "bad_input")
        assert not (tmp_path / "root" / "notes").exists() or http.get(url).json()["stats"]["documents"] == 0


# --- MCP ----------------------------------------------------------------------------------------------


def mcp_calls(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Each call's result through the SDK's client on /mcp of a real server."""
    pytest.importorskip("mcp", reason="the server extra is not installed")
    import anyio
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    with rest(tmp_path) as server:

        async def run() -> list[Any]:
            http = httpx2.AsyncClient(timeout=60)
            async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
                return [await client.call_tool(name, args) for name, args in calls]

        return anyio.run(run)


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_mcp_tools_refuse_arguments_they_do_not_take(tmp_path: Path) -> None:
    note = {"text": "Alice lives in Lyon.", "id": "a"}
    results = mcp_calls(
        tmp_path,
        [
            ("remember", {**note, "tags": ["x"]}),
            ("recall", {"query": "Where?", "topk": 3}),
            ("remember", {"documents": [{"id": "b", "text": "Bob.", "meta": {"a": 1}}]}),
            ("remember", {"id": "c", "metadata": {"a": 1}}),
            ("list_documents", {}),
        ],
    )
    assert results[0].is_error and "tags" in text_of(results[0]) and "Extra inputs" in text_of(results[0])
    assert results[1].is_error and "topk" in text_of(results[1])
    assert results[2].is_error and "documents[0] has meta" in text_of(results[2])
    assert results[3].is_error and "give `text` too" in text_of(results[3])
    assert results[4].is_error and "not_found" in text_of(results[4])  # none of them wrote (or created) anything


def test_mcp_remember_keeps_the_metadata_it_is_given(tmp_path: Path) -> None:
    note = {"text": "Alice lives in Lyon.", "id": "a", "metadata": {"source": "chat", "turn": 3}}
    results = mcp_calls(tmp_path, [("remember", note), ("list_documents", {})])
    assert not results[0].is_error, text_of(results[0])
    assert results[1].structured_content["documents"] == [{"id": "a", "metadata": {"source": "chat", "turn": 3}}]


def test_rest_put_replaces_the_whole_document_and_says_so(tmp_path: Path) -> None:
    """PUT is replace (the OpenAPI schema and docs/server.md say so): metadata and title left out are cleared."""
    url = "/v1/memories/notes"
    with rest(tmp_path, docs=True) as server, server.client() as http:  # the schema is served with --docs
        doc = {"id": "a", "text": "Alice lives in Lyon.", "title": "Alice", "metadata": {"source": "wiki"}}
        http.post(f"{url}/documents", json={"documents": [doc]})
        http.put(f"{url}/documents/a", json={"text": "Alice lives in Paris."})
        assert http.get(f"{url}/documents").json()["documents"] == [{"id": "a", "metadata": {}}]
        found = http.post(f"{url}/retrieve", json={"query": "Alice", "method": "dense"}).json()["results"][0]
        assert found["passages"][0]["title"] is None and found["passages"][0]["text"] == "Alice lives in Paris."
        put = http.get("/openapi.json").json()["paths"]["/v1/memories/{name}/documents/{doc_id}"]["put"]
        assert "PUT is replace, not merge" in put["description"]
        assert "cleared, not kept" in put["description"]
    reference = (Path(__file__).resolve().parents[1] / "docs" / "server.md").read_text(encoding="utf-8")
    assert "PUT replaces the whole document" in reference
