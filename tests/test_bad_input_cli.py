"""Issue 10, defect 10: inputs that used to end in a traceback give "engram: error: ..." and exit 1 (or, for
a broken LLM at query time, a warning and the unfiltered result), and one LLM reply cannot flood the graph."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from engram import Document, InputError, Memory
from engram.cli import main
from engram.embed import HashEmbedder
from engram.extract.openie import MAX_ENTITIES, MAX_PHRASE_CHARS, MAX_TRIPLES, extract_passage
from engram.llm.jsonparse import MAX_ECHO_CHARS
from fake_openai import FakeOpenAI, reply
from helpers import DOCS, EXTRACTIONS, cli_refused

HASH = ["--embedder", "hash"]
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI; it must exit 1 with a one-line message (no traceback). Returns the message."""
    return cli_refused(capsys, [*argv, *HASH])


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_deeply_nested_json_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mem = str(tmp_path / "m")
    deep_row = '{"id": "d", "text": "t", "extra": ' + DEEP + "}\n"
    assert "nested" in refused(capsys, "index", write(tmp_path / "c.jsonl", deep_row), "-m", mem)
    assert "nested" in refused(capsys, "index", write(tmp_path / "c.json", "[" + deep_row + "]"), "-m", mem)
    corpus = write(tmp_path / "ok.jsonl", json.dumps({"id": "a", "text": "Alice lives in Lyon."}) + "\n")
    extractions = write(tmp_path / "x.jsonl", '{"id": "a", "triples": ' + DEEP + "}\n")
    assert "nested" in refused(capsys, "index", corpus, "--extractions", extractions, "-m", mem)
    hippo = write(tmp_path / "openie.json", '{"docs": ' + DEEP + "}")
    assert "nested" in refused(capsys, "index", corpus, "--extractions", hippo, "-m", mem)
    assert main(["index", corpus, "-m", mem, *HASH]) == 0
    capsys.readouterr()
    questions = write(tmp_path / "q.jsonl", '{"question": "Where?", "gold": ' + DEEP + "}\n")
    assert "nested" in refused(capsys, "retrieve", "--questions", questions, "-m", mem)
    assert "nested" in refused(capsys, "eval", "--questions", questions, "--corpus", corpus)
    assert "nested" in refused(capsys, "eval", "--questions", write(tmp_path / "q.json", DEEP), "--corpus", corpus)


@pytest.mark.parametrize(
    "row",
    [
        {"id": "d", "text": "Some text.", "title": ["a", "list"]},
        {"id": "d", "text": "Some text.", "title": {"a": "dict"}},
        {"id": "d\ud800", "text": "Some text."},
        {"id": "d", "text": "Some text.", "title": "bad \udfff title"},
    ],
)
def test_bad_fields_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], row: dict[str, object]) -> None:
    corpus = write(tmp_path / "c.jsonl", json.dumps(row) + "\n")
    message = refused(capsys, "index", corpus, "-m", str(tmp_path / "m"))
    assert "title" in message or "surrogate" in message


def test_bad_fields_are_refused_by_the_library(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        for doc in (
            Document("d", "text", title=["x"]),  # type: ignore[arg-type]
            Document("d\ud800", "text"),
            Document("d", "text", metadata={"bad": object()}),
            Document("d", "text", metadata=["not", "a", "dict"]),  # type: ignore[arg-type]
        ):
            with pytest.raises(InputError):
                memory.index([doc])
        assert memory.stats()["documents"] == 0


def test_flipped_manifest_byte_is_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mem = tmp_path / "m"
    with Memory(mem, embedder=HashEmbedder(), llm=False) as memory:
        memory.index(DOCS[:1])
    data = bytearray((mem / "manifest.json").read_bytes())
    data[3] ^= 0xC0  # no longer UTF-8
    (mem / "manifest.json").write_bytes(bytes(data))
    assert "manifest" in refused(capsys, "stats", "-m", str(mem))


def garbage_forms() -> list[str]:
    raw = bytes(random.Random(1).randrange(256) for _ in range(3000))
    return [raw.decode("utf-8", "surrogateescape"), 'ok {"facts": [["a\udc80", "b", "c"]]}']


@pytest.mark.parametrize("content", garbage_forms())
def test_llm_garbage_at_query_time_falls_back(
    tmp_path: Path, fake_llm: FakeOpenAI, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.handler = lambda request: reply(content)
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        result = memory.retrieve("Where was Alice Moreau born?", top_k=3)[0]
        assert result.passages
        answers = memory.answer("Where was Alice Moreau born?")
        assert isinstance(answers[0].answer, str)


def test_llm_reply_that_is_not_utf8_is_an_llm_failure(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fake_openai

    raw = bytes(random.Random(2).randrange(128, 256) for _ in range(500))  # not UTF-8, no JSON syntax

    def send(self: Any, status: int, body: Any, headers: dict[str, str]) -> None:
        data = json.dumps(body).encode("utf-8").replace(b"GARBAGE", raw)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    monkeypatch.setattr(fake_openai._RequestHandler, "_send", send)
    fake_llm.handler = lambda request: reply("GARBAGE")
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=fake_llm.chat(max_retries=0)) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        result = memory.retrieve("Where was Alice Moreau born?", top_k=3)[0]
        assert result.passages  # the filter was skipped with a warning, the ranking still came back


def test_one_reply_cannot_flood_the_graph(fake_llm: FakeOpenAI) -> None:
    entities = [f"entity {i}" for i in range(20_000)] + ["x" * 100_000]
    triples = [[f"entity {i}", "relates to", f"entity {i + 1}"] for i in range(20_000)]
    fake_llm.push(json.dumps({"entities": entities}), json.dumps({"triples": triples}))
    outcome = extract_passage(fake_llm.chat(), "A passage about many entities.")
    assert outcome.ok
    assert len(outcome.entities) == MAX_ENTITIES
    assert len(outcome.triples) == MAX_TRIPLES
    assert all(len(part) <= MAX_PHRASE_CHARS for t in outcome.triples for part in t)


def test_repair_does_not_echo_a_huge_reply(fake_llm: FakeOpenAI) -> None:
    huge = "not json " * 500_000  # 4.5 MB
    fake_llm.push(huge, json.dumps({"entities": ["Alice"]}), json.dumps({"triples": [["Alice", "is", "here"]]}))
    outcome = extract_passage(fake_llm.chat(), "Alice is here.")
    assert outcome.ok
    repair = fake_llm.requests[1]["messages"]
    echoed = [m["content"] for m in repair if m["role"] == "assistant"][-1]
    assert len(echoed) <= MAX_ECHO_CHARS + 200
    assert sum(len(str(m["content"])) for m in repair) < 20_000
