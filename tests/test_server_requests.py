"""Requests the REST server must answer or refuse with a 4xx naming the problem, never a 500 (over a real
uvicorn): queries BM25 cannot score, bad Unicode, malformed extractions, wrong methods, empty updates and
streams without an LLM. (Found by an outside audit: each test failed on the code before.)"""

from __future__ import annotations

from pathlib import Path

from server_helpers import error_of, hash_settings, serve


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
