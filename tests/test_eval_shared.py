"""`engram eval` with every offline method on the shared MuSiQue data (skipped where it is absent).

The hash embedder keeps it fast; docs/reproduction.md has the MiniLM numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram.cli import main

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
ENTITIES = Path(__file__).resolve().parents[1] / "bench" / "musique50_query_entities.jsonl"
pytestmark = pytest.mark.skipif(not (DATA / "corpus.jsonl").exists(), reason="shared MuSiQue data not present")

METHODS = (
    "bm25,dense,hipporag1,hipporag2,hipporag2-ner-to-node,hipporag2-query-to-node,"
    "hipporag2-no-passage-nodes,hipporag2-no-filter"
)


def test_every_offline_method_on_the_shared_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)
    args = [
        "eval",
        "--corpus", str(DATA / "corpus.jsonl"),
        "--questions", str(DATA / "questions.jsonl"),
        "--extractions", str(DATA / "openie-gpt-3.5-turbo-1106.jsonl"),
        "--query-entities", str(ENTITIES),
        "--methods", METHODS,
        "--embedder", "hash",
        "--bootstrap-samples", "500",
        "--out", str(tmp_path / "run"),
        "--json",
    ]  # fmt: skip
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["index"]["passages"] == 1890
    assert set(result["methods"]) == set(METHODS.split(","))
    for name, summary in result["methods"].items():
        assert summary["questions"] == 50, name
        assert set(summary["recall"]) == {"1", "2", "5", "10", "20"}, name
        assert summary.get("dense_fallbacks", 0) == 0, name  # every question has entities / kept facts
    assert any(c["a"] == "hipporag2" and c["b"] == "dense" and c["metric"] == "recall@5" for c in result["comparisons"])
    assert (tmp_path / "run" / "report.md").exists()
    assert len((tmp_path / "run" / "details.jsonl").read_text().splitlines()) == 50 * 8
