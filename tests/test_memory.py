from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engram import Document, Memory, MemoryConfig, RetrieveConfig
from engram.embed import HashEmbedder
from helpers import DOCS, EXTRACTIONS, CountingEmbedder


def build(path: Path) -> Memory:
    memory = Memory(path, embedder=HashEmbedder())
    memory.index(DOCS, extractions=EXTRACTIONS)
    return memory


def test_index_builds_the_graph(tmp_path: Path) -> None:
    with build(tmp_path / "m") as memory:
        stats = memory.stats()
    assert stats["passages"] == 5 and stats["documents"] == 5
    assert stats["facts"] == 8
    assert stats["phrases"] == 10  # acme tools, alice moreau, 1998, lyon, france, rhone, zenith foods, ...
    assert stats["pending"] == 0


def test_hipporag2_follows_the_graph_and_explains(tmp_path: Path) -> None:
    with build(tmp_path / "m") as memory:
        r = memory.retrieve("Who founded Acme Tools?", top_k=3)[0]
    assert r.method == "hipporag2"
    assert r.passages[0].id == "acme"
    assert r.candidate_facts and r.facts == r.candidate_facts  # no LLM: every candidate is kept
    assert not r.filtered
    assert any(s.phrase == "acme tools" for s in r.seeds)
    assert len(r.seeds) <= 5
    # the founder's own passage is reached through the shared phrase "alice moreau"
    assert "alice" in [p.id for p in r.passages]
    assert all(a.score >= b.score for a, b in zip(r.passages, r.passages[1:]))


def test_hybrid_fallback_when_no_fact_is_kept(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m", embedder=HashEmbedder(), config=MemoryConfig(retrieve=RetrieveConfig()))
    memory.index(DOCS)  # no extractions and no LLM: all pending, no facts
    r = memory.retrieve("capital of Norway", top_k=2)[0]
    hybrid = memory.retrieve("capital of Norway", top_k=2, method="hybrid")[0]
    assert r.method == "hybrid" and r.pending == 5
    assert [p.id for p in r.passages] == [p.id for p in hybrid.passages]
    assert r.passages[0].id == "oslo"
    assert r.signals == "dense cosine + BM25 only (no facts yet, 5 passages pending extraction)"
    memory.close()
    dense_only = MemoryConfig(retrieve=RetrieveConfig(lexical_weight=0.0))
    with Memory(tmp_path / "m", embedder=HashEmbedder(), config=dense_only) as memory:  # as before hybrid scores
        r = memory.retrieve("capital of Norway", top_k=2)[0]
        dense = memory.retrieve("capital of Norway", top_k=2, method="dense")[0]
    assert r.method == "dense" and [p.id for p in r.passages] == [p.id for p in dense.passages]


def test_reopen_gives_identical_results(tmp_path: Path) -> None:
    queries = ["Who founded Acme Tools?", "Where was the founder of Zenith Foods born?", "river in France"]
    with build(tmp_path / "m") as memory:
        before = memory.retrieve(queries, top_k=5)
        stats = memory.stats()
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as reopened:
        after = reopened.retrieve(queries, top_k=5)
        assert reopened.stats() == stats
    assert before == after


def test_missing_snapshot_is_rebuilt_from_records(tmp_path: Path) -> None:
    with build(tmp_path / "m") as memory:
        before = memory.retrieve("Who founded Acme Tools?")
    for child in (tmp_path / "m" / "index").iterdir():
        for f in child.iterdir():
            f.unlink()
        child.rmdir()
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as reopened:
        assert reopened.retrieve("Who founded Acme Tools?") == before


def test_incremental_index_is_visible_at_once(tmp_path: Path) -> None:
    with build(tmp_path / "m") as memory:
        memory.retrieve("anything")
        memory.index([Document("paris", "Paris is the capital of France.", title="Paris")])
        ids = [p.id for p in memory.retrieve("capital of France", top_k=2, method="dense")[0].passages]
        assert "paris" in ids
        assert memory.stats()["pending"] == 1


def test_reindexing_unchanged_documents_is_a_no_op(tmp_path: Path) -> None:
    with build(tmp_path / "m") as memory:
        generation = memory.stats()["generation"]
        report = memory.index(DOCS)
        assert report.unchanged == 5 and report.documents == 0
        assert memory.stats()["generation"] == generation


def test_identical_content_is_embedded_once_and_documents_stay_independent(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with Memory(tmp_path / "m", embedder=embedder) as memory:
        memory.index([Document("a", "Same text here."), Document("b", "Same text here.")])
        assert embedder.embedded == 1  # one vector for the shared content
        assert memory.stats()["documents"] == 2
        memory.delete(["a"])
        assert [p.id for p in memory.retrieve("same text", method="dense")[0].passages] == ["b"]


def test_long_documents_are_chunked_with_derived_ids(tmp_path: Path) -> None:
    text = " ".join(f"word{i}" for i in range(700))
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        report = memory.index([Document("long", text)])
        assert report.passages == 3
        ids = {p.id for p in memory.retrieve("word5", top_k=10, method="bm25")[0].passages}
    assert ids <= {"long#0", "long#1", "long#2"}


def test_methods_and_metadata(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index([Document("x", "Quokkas live on Rottnest Island.", metadata={"source": "wiki"}), "Plain str doc."])
        bm25 = memory.retrieve("quokkas island", method="bm25")[0]
        assert bm25.passages[0].id == "x" and bm25.passages[0].metadata == {"source": "wiki"}
        assert np.isfinite(bm25.passages[0].score)
        with pytest.raises(ValueError, match="unknown retrieval method"):
            memory.retrieve("q", method="nope")
