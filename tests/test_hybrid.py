"""Hybrid passage scores (dense cosine + BM25): the pure function, the `hybrid` method against scores computed
from the `dense` and `bm25` methods' own results, and the default method's use of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engram import Document, Memory, MemoryConfig, RetrieveConfig
from engram.embed import HashEmbedder
from engram.errors import InputError
from engram.retrieve.scoring import hybrid_scores
from helpers import DOCS, EXTRACTIONS

# a corpus where the query's rare word ("xq-7") is in one passage that shares little else with the query
NOTES = [
    Document("release-2", "Version 2.0 brings the xq-7 exporter and faster startup.", title="Release 2.0"),
    Document("intro", "The exporter writes reports; an exporter for every format is planned.", title="Intro"),
    Document("faq", "Which exporter should I use for reports? Any exporter writes reports.", title="FAQ"),
    Document("other", "Installation needs Python and a C compiler.", title="Install"),
]


def test_hybrid_scores_add_the_weighed_share_of_the_best_lexical_score() -> None:
    dense = np.array([[0.5, 0.4, -np.inf], [0.1, 0.2, 0.3]])
    lexical = np.array([[2.0, 8.0, -np.inf], [0.0, 0.0, 0.0]])  # the second query matched no word
    got = hybrid_scores(dense, lexical, 0.2)
    assert got[0, 0] == pytest.approx(0.5 + 0.2 * 2 / 8) and got[0, 1] == pytest.approx(0.4 + 0.2)
    assert got[0, 2] == -np.inf  # a dead row stays dead
    assert got[1].tolist() == [0.1, 0.2, 0.3]  # no lexical match: the cosines unchanged
    assert hybrid_scores(dense[1], lexical[0], 0.0).tolist() == [0.1, 0.2, 0.3]  # weight 0: dense alone
    with pytest.raises(ValueError):
        hybrid_scores(dense, lexical[:, :2], 0.2)


def _all_scores(memory: Memory, query: str, method: str) -> dict[str, float]:
    return {p.id: p.score for p in memory.retrieve(query, top_k=100, method=method)[0].passages}


@pytest.mark.parametrize("weight", [0.2, 1.0])
def test_hybrid_ranks_by_cosine_plus_the_weighed_bm25_share(tmp_path: Path, weight: float) -> None:
    config = MemoryConfig(retrieve=RetrieveConfig(lexical_weight=weight))
    with Memory(tmp_path / "m", embedder=HashEmbedder(), config=config) as memory:
        memory.index(NOTES)
        query = "which exporter is in xq-7?"
        dense, bm25 = _all_scores(memory, query, "dense"), _all_scores(memory, query, "bm25")
        best = max(bm25.values())
        oracle = {pid: cos + weight * max(bm25.get(pid, 0.0), 0.0) / best for pid, cos in dense.items()}
        r = memory.retrieve(query, top_k=4, method="hybrid")[0]
    assert r.method == "hybrid" and r.signals == "dense cosine + BM25"
    expected = sorted(oracle, key=lambda pid: -oracle[pid])
    assert [p.id for p in r.passages] == expected
    assert [p.score for p in r.passages] == pytest.approx([oracle[pid] for pid in expected])
    assert bm25 and max(bm25, key=lambda pid: bm25[pid]) == "release-2"


def test_default_without_facts_ranks_like_hybrid_and_says_so(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index(NOTES)  # no LLM, no extractions: every passage pending
        query = "which exporter is in xq-7?"
        default, hybrid = (memory.retrieve(query, top_k=4, method=m)[0] for m in ("hipporag2", "hybrid"))
    assert [p.id for p in default.passages] == [p.id for p in hybrid.passages]
    assert default.method == "hybrid" and "pending" in default.fallback_reason
    assert default.signals.startswith("dense cosine + BM25 only (")


def test_default_with_facts_uses_hybrid_passage_scores_in_its_prior(tmp_path: Path) -> None:
    """The prior is built from the hybrid scores: with lexical_weight 0 the result is the dense-prior
    ranking; the first passage is the first stage's best in each case (dense_first)."""
    query = "Who founded Acme Tools?"
    results = {}
    for weight in (0.0, 0.2):
        config = MemoryConfig(retrieve=RetrieveConfig(lexical_weight=weight))
        with Memory(tmp_path / f"m{weight}", embedder=HashEmbedder(), config=config) as memory:
            memory.index(DOCS, extractions=EXTRACTIONS)
            results[weight] = memory.retrieve(query, top_k=5)[0]
            first = memory.retrieve(query, top_k=1, method="hybrid" if weight else "dense")[0].passages[0].id
        assert results[weight].method == "hipporag2" and results[weight].passages[0].id == first
    assert results[0.2].signals.startswith("PageRank from ") and results[0.2].signals.endswith(
        "with a dense cosine + BM25 passage prior"
    )
    assert results[0.0].signals.endswith("with a dense cosine passage prior")
    assert [p.score for p in results[0.0].passages] != [p.score for p in results[0.2].passages]


def test_lexical_weight_out_of_range_is_refused() -> None:
    with pytest.raises(InputError, match="lexical_weight"):
        RetrieveConfig(lexical_weight=-0.1)


def test_a_context_taken_before_a_write_scores_bm25_over_its_own_view(tmp_path: Path) -> None:
    """A reader's view and its BM25 index are of one generation: a write between taking the context and
    asking for BM25 scores (a reader racing a commit) neither fails nor mixes the two."""
    from engram.retrieve.run import retrieve

    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index(NOTES)
        before = memory.context()
        memory.index([Document("late", "The xq-7 exporter moved to version 3.", title="Release 3")])
        for method in ("bm25", "hybrid", "hipporag2"):
            old = retrieve(before, ["xq-7 exporter"], 10, method)[0]
            assert "late" not in [p.id for p in old.passages] and len(old.passages) == len(NOTES), method
        assert before.bm25().size == len(NOTES)
        assert "late" in [p.id for p in memory.retrieve("xq-7 exporter", top_k=10, method="bm25")[0].passages]
