"""Continual learning on the shared MuSiQue data (issue 4, acceptance 3), through the command line: a memory built
in 10 increments equals one built at once, and deleting half of the documents equals building the other half
from scratch (same graph, same rankings, the same scores to the last bit). Skips when the data is absent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram import Memory
from engram.cli import main
from engram.eval.data import load_questions

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
CORPUS = DATA / "corpus.jsonl"
EXTRACTIONS = DATA / "openie-gpt-3.5-turbo-1106.jsonl"
EMBEDDER = "hash:64"
METHODS = ("hipporag2", "dense", "bm25")

pytestmark = pytest.mark.skipif(not CORPUS.exists(), reason="shared MuSiQue data not present")


def write_parts(rows: list[str], folder: Path, parts: int) -> list[Path]:
    """The corpus lines in `parts` consecutive JSONL files."""
    folder.mkdir()
    size = -(-len(rows) // parts)
    paths = []
    for i in range(parts):
        path = folder / f"part_{i:02d}.jsonl"
        path.write_text("".join(rows[i * size : (i + 1) * size]), encoding="utf-8")
        paths.append(path)
    return paths


def index(memory: Path, corpus: Path) -> None:
    args = ["index", str(corpus), "--memory", str(memory), "--extractions", str(EXTRACTIONS)]
    assert main([*args, "--embedder", EMBEDDER, "--no-progress"]) == 0


def observe(path: Path) -> dict[str, Any]:
    """The graph by names and, per method, each question's ranked ids and scores."""
    questions = [q.question for q in load_questions(DATA / "questions.jsonl")]
    with Memory(path, embedder=EMBEDDER, create=False) as memory:
        results = {m: memory.retrieve(questions, top_k=10, method=m) for m in METHODS}
        return {
            "graph": memory.graph(),
            "stats": {k: v for k, v in memory.stats().items() if k != "generation"},
            "ranked": {m: [(r.method, [p.id for p in r.passages]) for r in rs] for m, rs in results.items()},
            "facts": {m: [[f.triple for f in r.facts] for r in rs] for m, rs in results.items()},
            "scores": {m: [[p.score for p in r.passages] for r in rs] for m, rs in results.items()},
        }


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["graph"] == b["graph"]
    assert a["stats"] == b["stats"]
    assert a["ranked"] == b["ranked"]
    assert a["facts"] == b["facts"]
    assert a["scores"] == b["scores"]  # to the last bit, like the property test in test_continual.py


@pytest.fixture(scope="module")
def rows() -> list[str]:
    return [line + "\n" for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_ten_increments_through_the_cli_equal_one_build(tmp_path: Path, rows: list[str]) -> None:
    for part in write_parts(rows, tmp_path / "parts", 10):
        index(tmp_path / "incremental", part)
    index(tmp_path / "once", CORPUS)
    once = observe(tmp_path / "once")
    assert once["stats"]["passages"] == 1890 and once["stats"]["documents"] == 1890
    assert_same(observe(tmp_path / "incremental"), once)


def test_deleting_half_equals_building_the_other_half(tmp_path: Path, rows: list[str]) -> None:
    ids = [json.loads(r)["id"] for r in rows]
    index(tmp_path / "full", CORPUS)
    assert main(["delete", *ids[::2], "--memory", str(tmp_path / "full"), "--embedder", EMBEDDER]) == 0
    half = tmp_path / "half.jsonl"
    half.write_text("".join(rows[1::2]), encoding="utf-8")
    index(tmp_path / "fresh", half)
    fresh = observe(tmp_path / "fresh")
    assert fresh["stats"]["passages"] == 945
    assert_same(observe(tmp_path / "full"), fresh)
