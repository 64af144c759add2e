"""The REST API through HTTP against the real server (uvicorn on 127.0.0.1): every route, writes visible to the
next read, two memories kept apart, and each error status."""

from __future__ import annotations

import json
from pathlib import Path

from engram import Document, Memory
from engram.embed import HashEmbedder
from fake_openai import FakeOpenAI
from server_helpers import error_of, hash_settings, seeded_memory, serve


def test_every_read_route_on_one_memory(tmp_path: Path) -> None:
    path = seeded_memory(tmp_path / "m")
    with Memory(path, embedder=HashEmbedder(), llm=False) as memory:
        expected = memory.retrieve("Where was the founder of Acme Tools born?", top_k=3)[0]
        stats = memory.stats()
    with serve(hash_settings(memory=path)) as server, server.client() as http:
        assert http.get("/v1/health").json()["status"] == "ok"
        assert http.get("/v1/memories").json() == {"memories": [{"name": "default", "writable": True}]}
        got = http.get("/v1/memories/default").json()
        assert got["name"] == "default"
        assert {k: got["stats"][k] for k in ("documents", "passages", "facts")} == {
            k: stats[k] for k in ("documents", "passages", "facts")
        }
        body = {"query": "Where was the founder of Acme Tools born?", "top_k": 3}
        result = http.post("/v1/memories/default/retrieve", json=body).json()["results"][0]
        assert [p["id"] for p in result["passages"]] == [p.id for p in expected.passages]
        assert [p["score"] for p in result["passages"]] == [p.score for p in expected.passages]
        assert result["method"] == "hipporag2" and not result["fell_back"]
        assert [s["phrase"] for s in result["seeds"]] == [s.phrase for s in expected.seeds]
        assert len(result["candidate_facts"]) == len(expected.candidate_facts) > 0
        assert result["facts"] == result["candidate_facts"]  # no LLM: no filter, every candidate kept
        assert result["filtered"] is False
        many = http.post("/v1/memories/default/retrieve", json={"queries": ["Oslo", "Lyon"], "method": "bm25"})
        assert [r["query"] for r in many.json()["results"]] == ["Oslo", "Lyon"]
        assert many.json()["results"][0]["passages"][0]["id"] == "oslo"
        assert http.get("/openapi.json").status_code == 404  # only with --docs: tests/test_server_security.py
        page = http.get("/")
        assert page.status_code == 200 and "vendor/cytoscape.min.js" in page.text
        assert http.get("/vendor/cytoscape.min.js").status_code == 200


def test_the_memory_route_says_whether_it_has_an_llm_to_answer_with(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    """The web page disables "Answer with LLM" by this flag, instead of offering a button that fails."""
    path = seeded_memory(tmp_path / "m")
    with serve(hash_settings(memory=path)) as server, server.client() as http:
        assert http.get("/v1/memories/default").json()["llm_configured"] is False
        refused = http.post("/v1/memories/default/answer", json={"query": "Who founded Acme Tools?"})
        assert refused.status_code == 503  # what the flag predicts
    with_llm = hash_settings(memory=path, llm_base_url=fake_llm.base_url, llm_model="fake-model")
    with serve(with_llm) as server, server.client() as http:
        assert http.get("/v1/memories/default").json()["llm_configured"] is True


def test_document_listing_pages_with_a_cursor(tmp_path: Path) -> None:
    with serve(hash_settings(memory=seeded_memory(tmp_path / "m"))) as server, server.client() as http:
        seen, cursor = [], None
        while True:
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = http.get("/v1/memories/default/documents", params=params).json()
            assert page["total"] == 5
            seen += [d["id"] for d in page["documents"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == sorted(["acme", "alice", "lyon", "bob", "oslo"])
        only = http.get("/v1/memories/default/documents", params={"prefix": "al"}).json()
        assert [d["id"] for d in only["documents"]] == ["alice"] and only["total"] == 1


def test_graph_neighbourhood_around_a_phrase_and_a_passage(tmp_path: Path) -> None:
    with serve(hash_settings(memory=seeded_memory(tmp_path / "m"))) as server, server.client() as http:
        graph = http.get("/v1/memories/default/graph", params={"around": "Alice Moreau", "hops": 1}).json()
        ids = {n["id"] for n in graph["nodes"]}
        assert {"phrase:alice moreau", "phrase:acme tools", "phrase:lyon", "passage:acme", "passage:alice"} <= ids
        assert "phrase:oslo" not in ids  # two hops away at least
        kinds = {(e["source"], e["target"], e["kind"]) for e in graph["edges"]}
        assert ("phrase:acme tools", "phrase:alice moreau", "relation") in kinds
        assert ("phrase:alice moreau", "passage:alice", "context") in kinds
        assert all(e["source"] in ids and e["target"] in ids for e in graph["edges"])
        start = [n for n in graph["nodes"] if n["start"]]
        assert [n["id"] for n in start] == ["phrase:alice moreau"]
        wider = http.get("/v1/memories/default/graph", params={"around": ["oslo", "lyon"], "hops": 2}).json()
        wanted = {"passage:oslo", "phrase:norway", "phrase:bob stein", "passage:lyon"}
        assert wanted <= {n["id"] for n in wider["nodes"]}
        small = http.get("/v1/memories/default/graph", params={"around": "Alice Moreau", "limit": 2}).json()
        assert len(small["nodes"]) == 2 and small["truncated"] is True


def test_update_and_delete_are_visible_to_the_next_retrieve(tmp_path: Path) -> None:
    with serve(hash_settings(memory=seeded_memory(tmp_path / "m"))) as server, server.client() as http:
        url = "/v1/memories/default"

        def top(query: str) -> list[str]:
            results = http.post(f"{url}/retrieve", json={"query": query, "method": "bm25", "top_k": 5}).json()
            return [p["text"] for p in results["results"][0]["passages"]]

        new = "Oslo hosts the Nobel Peace Prize ceremony every December."
        put = http.put(f"{url}/documents/oslo", json={"text": new, "title": "Oslo"})
        assert put.status_code == 200 and put.json()["report"]["documents"] == 1
        assert top("Nobel Peace Prize ceremony")[0] == new
        assert "Oslo is the capital of Norway." not in top("capital of Norway")
        gone = http.delete(f"{url}/documents/oslo")
        assert gone.status_code == 200 and gone.json()["report"]["stats"]["passages"] == 4
        assert new not in top("Nobel Peace Prize ceremony")
        assert error_of(http.delete(f"{url}/documents/oslo")) == (404, "not_found")
        added = http.post(f"{url}/documents", json={"documents": [{"id": "a/b.md", "text": "Paris is in France."}]})
        assert added.status_code == 200 and added.json()["report"]["documents"] == 1
        assert top("Paris")[0] == "Paris is in France."
        assert http.delete(f"{url}/documents/a/b.md").status_code == 200  # ids with slashes


def test_two_memories_are_kept_apart(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with serve(hash_settings(root=root)) as server, server.client() as http:
        assert http.get("/v1/memories").json() == {"memories": []}
        for name, text in (("work", "The quarterly report is due on Friday."), ("home", "The cat eats at seven.")):
            reply = http.post(f"/v1/memories/{name}/documents", json={"documents": [{"id": name, "text": text}]})
            assert reply.status_code == 200
        assert [m["name"] for m in http.get("/v1/memories").json()["memories"]] == ["home", "work"]
        for name in ("work", "home"):
            result = http.post(f"/v1/memories/{name}/retrieve", json={"query": "when", "top_k": 5}).json()
            assert [p["id"] for p in result["results"][0]["passages"]] == [name]
            assert http.get(f"/v1/memories/{name}").json()["stats"]["documents"] == 1
        assert (root / "work" / "manifest.json").is_file() and (root / "home" / "manifest.json").is_file()
        assert error_of(http.get("/v1/memories/garden")) == (404, "not_found")


def test_error_statuses(tmp_path: Path) -> None:
    settings = hash_settings(memory=seeded_memory(tmp_path / "m"), max_body=4096)
    with serve(settings) as server, server.client() as http:
        url = "/v1/memories/default"
        missing = http.post(f"{url}/documents", json={"documents": [{"id": "x"}]})
        assert error_of(missing) == (400, "bad_input") and "documents.0.text" in missing.json()["error"]["message"]
        bad_k = http.post(f"{url}/retrieve", json={"query": "x", "top_k": 0})
        assert error_of(bad_k) == (400, "bad_input") and "top_k" in bad_k.json()["error"]["message"]
        method = http.post(f"{url}/retrieve", json={"query": "x", "method": "magic"})
        assert error_of(method) == (400, "bad_input") and "magic" in method.json()["error"]["message"]
        assert error_of(http.post(f"{url}/retrieve", json={})) == (400, "bad_input")
        assert error_of(http.post(f"{url}/retrieve", content=b"{not json", headers=_json())) == (400, "bad_input")
        empty = http.put(f"{url}/documents/acme", json={"text": "  "})
        assert error_of(empty) == (400, "bad_input") and "delete" in empty.json()["error"]["message"]
        assert error_of(http.get("/v1/memories/other")) == (404, "not_found")
        assert error_of(http.get("/v1/jobs/0123")) == (404, "not_found")
        assert error_of(http.get("/v1/nothing-here")) == (404, "not_found")
        assert error_of(http.get(f"{url}/graph", params={"around": "no such thing"})) == (404, "not_found")
        big = {"documents": [{"id": "big", "text": "word " * 2000}]}
        assert error_of(http.post(f"{url}/documents", json=big)) == (413, "too_large")
        chunked = http.post(f"{url}/documents", content=iter([json.dumps(big).encode()]), headers=_json())
        assert error_of(chunked) == (413, "too_large")
        no_llm = http.post(f"{url}/answer", json={"query": "Who founded Acme Tools?"})
        assert error_of(no_llm) == (503, "llm_unavailable") and "LLM" in no_llm.json()["error"]["message"]
        assert http.get(f"{url}/documents").json()["total"] == 5  # nothing above changed the memory


def _json() -> dict[str, str]:
    return {"Content-Type": "application/json"}


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
