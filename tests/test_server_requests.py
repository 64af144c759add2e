"""Server defects an outside audit found (REST and MCP over a real uvicorn): each failed on the code before."""

from __future__ import annotations

from pathlib import Path

from engram import Document, Memory
from engram.embed import HashEmbedder
from server_helpers import error_of, hash_settings, serve


def test_each_memory_of_a_root_opens_with_its_own_embedder(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for name, dim in (("m64", 64), ("m32", 32)):
        with Memory(root / name, embedder=HashEmbedder(dim=dim), llm=False) as memory:
            memory.index([Document("d", f"A note written for the {dim}-dimension memory.")])
    with serve(hash_settings(root=root, embedder=None)) as server, server.client() as http:
        for name in ("m64", "m32", "m64"):
            response = http.post(f"/v1/memories/{name}/retrieve", json={"query": "note", "method": "dense"})
            assert response.status_code == 200, response.text
            assert response.json()["results"][0]["passages"][0]["id"] == "d"


def test_queries_without_a_bm25_term_and_bad_unicode_are_not_500(tmp_path: Path) -> None:
    with serve(hash_settings(root=tmp_path / "root")) as server, server.client() as http:
        url = "/v1/memories/notes"
        assert http.post(f"{url}/documents", json={"documents": [{"id": "a", "text": "Alice lives in Lyon."}]})
        for query in ("the", "x", "🎉🎉"):
            response = http.post(f"{url}/retrieve", json={"query": query, "method": "bm25"})
            assert response.status_code == 200, response.text
        bad = '{"query": "\\ud800", "method": "dense"}'
        response = http.post(f"{url}/retrieve", content=bad, headers={"content-type": "application/json"})
        assert error_of(response) == (400, "bad_input")
        title = '{"text": "Some text.", "title": "\\ud800"}'
        response = http.put(f"{url}/documents/t", content=title, headers={"content-type": "application/json"})
        assert error_of(response) == (400, "bad_input")


def test_extractions_sent_over_rest_are_checked(tmp_path: Path) -> None:
    with serve(hash_settings(root=tmp_path / "root")) as server, server.client() as http:
        document = {"id": "acme", "text": "Acme is based in Lyon."}
        for rows in ([{"id": "acme", "entities": 5, "triples": [["a", "b"]]}], [{"id": "acme", "triples": "bad"}]):
            response = http.post("/v1/memories/notes/documents", json={"documents": [document], "extractions": rows})
            assert error_of(response) == (400, "bad_input")
            assert "must be a list" in response.json()["error"]["message"]
        stats = http.get("/v1/memories/notes").json()
        assert stats["stats"]["documents"] == 0  # nothing was marked extracted by a refused request


def test_a_loopback_server_answers_only_for_this_machine(tmp_path: Path) -> None:
    with serve(hash_settings(root=tmp_path / "root")) as server, server.client() as http:
        assert http.get("/v1/health").status_code == 200
        for host in ("localhost", "127.0.0.1:8300", "[::1]:8300"):
            assert http.get("/v1/health", headers={"host": host}).status_code == 200
        for host in ("attacker.example", "attacker.example:8300", "127.0.0.1.nip.io"):
            response = http.get("/v1/memories", headers={"host": host})
            assert error_of(response) == (421, "wrong_host")
            response = http.delete("/v1/memories/notes/documents/a", headers={"host": host})
            assert error_of(response) == (421, "wrong_host")


def test_wrong_methods_empty_updates_and_streams_say_what_is_wrong(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with serve(hash_settings(root=root)) as server, server.client() as http:
        assert error_of(http.post("/v1/health")) == (405, "method_not_allowed")
        assert "use POST" in http.get("/v1/memories/notes/retrieve").json()["error"]["message"]
        response = http.put("/v1/memories/ghost/documents/a", json={"text": "  "})
        assert error_of(response) == (400, "bad_input") and "delete the document" in response.text
        assert not (root / "ghost").exists()  # a refused write creates no memory
        assert error_of(http.put("/v1/memories/notes/documents/" + "x" * 1025, json={"text": "t"}))[0] == 400
        put = http.put("/v1/memories/notes/documents/a", json={"text": "Alice lives in Lyon."}).json()
        assert put["report"]["added"] == ["a"]
        stream = {"query": "Where?", "stream": True}
        assert error_of(http.post("/v1/memories/notes/answer", json=stream))[0] == 503  # no LLM: before the stream
        wrong = {**stream, "method": "bogus"}
        assert error_of(http.post("/v1/memories/notes/answer", json=wrong)) == (400, "bad_input")


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
