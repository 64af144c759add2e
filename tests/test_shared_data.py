"""Checks on the shared MuSiQue data (../shared/data/musique-1890); skipped where it is absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram import Memory
from engram.embed import HashEmbedder
from engram.eval.data import load_corpus, load_questions
from engram.extract.importers import load_extractions

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
pytestmark = pytest.mark.skipif(not (DATA / "corpus.jsonl").exists(), reason="shared MuSiQue data not present")


def test_released_extractions_import_and_malformed_triples_are_dropped(tmp_path: Path) -> None:
    extractions = DATA / "openie-gpt-3.5-turbo-1106.jsonl"
    rows = [json.loads(line) for line in extractions.read_text().splitlines()]
    malformed = sum(1 for r in rows for t in r["triples"] if len(t) != 3 or not all(str(x).strip() for x in t))
    assert malformed == 185  # as the data README says
    assert len(load_extractions(extractions).by_id) == 1890
    corpus = load_corpus(DATA / "corpus.jsonl")[:300]
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64)) as memory:
        report = memory.index(corpus, extractions=extractions)
        assert report.imported == 300 and report.pending == 0
        assert report.dropped_triples >= sum(
            1 for r in rows[:300] for t in r["triples"] if len(t) != 3 or not all(str(x).strip() for x in t)
        )
        question = load_questions(DATA / "questions.jsonl")[0]
        result = memory.retrieve(question.question, top_k=10)[0]
        assert result.method == "hipporag2" and len(result.passages) == 10
        assert all(p.id.startswith("musique-") for p in result.passages)
