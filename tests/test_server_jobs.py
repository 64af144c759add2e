"""Writes that call an LLM run as jobs (scripted OpenAI-compatible server); answers, streams, the recognition
filter's fallback, an LLM that is down (503) and a write that lost a race with another process (409)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from fake_openai import FakeOpenAI, error, openie_answer, reply, task_of
from helpers import DOCS
from server_helpers import error_of, hash_settings, serve

BODY = {"documents": [{"id": d.id, "text": d.text, "title": d.title} for d in DOCS]}


def scripted(request: dict[str, Any]) -> Any:
    """OpenIE by content; the recognition filter keeps nothing; the reader answers Lyon."""
    answer = openie_answer(request)
    if answer is not None:
        return reply(answer)
    if task_of(request) == "filter":
        return reply(json.dumps({"facts": []}))
    if task_of(request) == "reader":
        return reply("The founder was born in Lyon.\nAnswer: Lyon")
    return None


def llm_settings(fake: FakeOpenAI, path: Path) -> Any:
    return hash_settings(memory=path, llm_base_url=fake.base_url, llm_model="fake-model")


def test_indexing_with_an_llm_runs_as_a_job_with_progress(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = scripted
    with serve(llm_settings(fake_llm, tmp_path / "m")) as server, server.client() as http:
        started = http.post("/v1/memories/default/documents", json=BODY)
        assert started.status_code == 202
        job = started.json()["job"]
        assert job["state"] in ("queued", "running", "done") and job["memory"] == "default"
        done = http.get(f"/v1/jobs/{job['id']}", params={"wait": 30}).json()
        assert done["state"] == "done" and done["error"] is None
        assert done["result"]["extracted"] == 5 and done["result"]["failed"] == 0
        assert done["progress"]["extract"] == {"done": 5, "total": 5}
        assert fake_llm.attempts == 10  # NER and triples per passage
        stats = http.get("/v1/memories/default").json()["stats"]
        assert stats["pending"] == 0 and stats["facts"] > 0
        waited = http.post(
            "/v1/memories/default/documents",
            json={"documents": [{"id": "new", "text": "Paris hosts the Louvre Museum."}], "wait": True},
        )
        assert waited.status_code == 200 and waited.json()["job"]["state"] == "done"
        assert waited.json()["report"]["extracted"] == 1


def test_filter_fallback_answer_and_stream(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = scripted
    with serve(llm_settings(fake_llm, tmp_path / "m")) as server, server.client() as http:
        body = {**BODY, "wait": True}
        assert http.post("/v1/memories/default/documents", json=body).json()["job"]["state"] == "done"
        query = {"query": "Where was Alice Moreau born?", "top_k": 2}
        paper = {**query, "method": "hipporag2-paper"}  # the paper's method: no kept fact, dense ranking
        result = http.post("/v1/memories/default/retrieve", json=paper).json()["results"][0]
        assert result["filtered"] is True and result["facts"] == [] and len(result["candidate_facts"]) > 0
        assert result["method"] == "dense" and result["fell_back"] is True
        assert result["requested_method"] == "hipporag2-paper" and "filter" in result["fallback_reason"]
        answered = http.post("/v1/memories/default/answer", json=query).json()["results"][0]
        assert answered["answer"] == "Lyon" and len(answered["passages"]) == 2
        with http.stream("POST", "/v1/memories/default/answer", json={**query, "stream": True}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            text = "".join(stream.iter_text())
        events = [block.split("\n") for block in text.strip().split("\n\n")]
        assert [e[0] for e in events] == ["event: answer", "event: done"]
        assert json.loads(events[0][1].removeprefix("data: "))["answer"] == "Lyon"


def test_an_llm_that_is_down_is_503(tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m"
    with Memory(path, embedder=HashEmbedder(), llm=False) as memory:
        memory.index(DOCS)
    monkeypatch.setenv("ENGRAM_LLM_MAX_RETRIES", "0")
    fake_llm.handler = lambda request: error(500, "the model server is down")
    with serve(llm_settings(fake_llm, path)) as server, server.client() as http:
        answered = http.post("/v1/memories/default/answer", json={"query": "Who founded Acme Tools?"})
        assert error_of(answered) == (503, "llm_unavailable")
        failed = http.post("/v1/memories/default/documents", json={"documents": [{"id": "x", "text": "Rome."}]})
        job = http.get(f"/v1/jobs/{failed.json()['job']['id']}", params={"wait": 30}).json()
        # extraction failures are recorded per passage (retried by a later extract), the write itself succeeds
        assert job["state"] == "done" and job["result"]["failed"] >= 1


@pytest.mark.parametrize("attempts", [1, None])
def test_a_write_that_lost_a_race_with_another_process(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, attempts: int | None
) -> None:
    """Another process commits while the server's write waits for the LLM. The library retries such a write
    (prepared again on the newer state); a write that keeps losing (here: allowed one attempt) is a 409."""
    if attempts is not None:
        from engram.index.live import retry

        def once(write: Any, **options: Any) -> Any:
            return retry.retry_conflicts(write, attempts, **options)

        monkeypatch.setattr("engram.memory.retry_conflicts", once)
    path = tmp_path / "m"
    with Memory(path, embedder=HashEmbedder(), llm=False) as memory:
        memory.index(DOCS[:2])
    extracting, release = threading.Event(), threading.Event()

    def slow(request: dict[str, Any]) -> Any:
        extracting.set()
        release.wait(20)
        return scripted(request)

    fake_llm.handler = slow
    with serve(llm_settings(fake_llm, path)) as server, server.client() as http:
        http.get("/v1/memories/default")  # the server opens the memory and reads generation N
        body = {"documents": [{"id": "late", "text": "Lyon has a large old town."}], "wait": True}
        outcome: dict[str, Any] = {}
        url = "/v1/memories/default/documents"
        writer = threading.Thread(target=lambda: outcome.update(r=http.post(url, json=body)))
        writer.start()
        assert extracting.wait(20)
        with Memory(path, embedder=HashEmbedder(), llm=False) as other:  # another process commits generation N+1
            other.update(Document("oslo", "Oslo is the capital of Norway."))
        release.set()
        writer.join(30)
        listed = sorted(d["id"] for d in http.get(url).json()["documents"])
        if attempts == 1:
            assert error_of(outcome["r"]) == (409, "conflict")
            assert "another writer" in outcome["r"].json()["error"]["message"]
            assert listed == ["acme", "alice", "oslo"]  # nothing of the refused write
        else:
            assert outcome["r"].status_code == 200 and outcome["r"].json()["job"]["state"] == "done"
            assert listed == ["acme", "alice", "late", "oslo"]  # both writes, the late one on the newer state
