"""Hybrid passage scores (dense cosine + BM25): the pure functions (the weighted score of the prior, the
significance fusion of a ranking by passage scores alone, each against hand-computed values), the `hybrid`
method against scores computed from the `dense` and `bm25` methods' own results, and the default method's use
of them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from engram import Document, Memory, MemoryConfig, RetrieveConfig
from engram.embed import HashEmbedder
from engram.errors import InputError
from engram.retrieve.scoring import best_of_n_surprisal, hybrid_scores, significance_scores
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


def _sidak(p: float, n: int) -> float:
    return -math.log(1.0 - (1.0 - p) ** n)


def test_significance_scores_against_hand_computed_tails() -> None:
    """Six live passages and a dead one. Cosines: a normal tail with the live rows' mean and deviation. BM25:
    three matches scoring 1, 2, 3 (mean 2, variance 2/3: a gamma of shape 6 and scale 1/3, whose tail is
    e^-y (1 + y + ... + y^5 / 5!) at y = 3 x) times the match share 3/6. Each tail p becomes
    -log(1 - (1 - p)^6), and the two add up."""
    cos = [0.9, 0.5, 0.4, 0.3, 0.2, 0.1, 0.95]
    bm25 = [0.0, 3.0, 2.0, 1.0, 0.0, 0.0, -math.inf]
    alive = [True] * 6 + [False]
    mean = sum(cos[:6]) / 6
    sd = math.sqrt(sum((c - mean) ** 2 for c in cos[:6]) / 6)

    def lexical_tail(x: float) -> float:
        y = 3.0 * x
        return 0.5 * math.exp(-y) * sum(y**j / math.factorial(j) for j in range(6))

    expected = []
    for c, b in zip(cos[:6], bm25[:6]):
        dense_part = _sidak(0.5 * math.erfc((c - mean) / sd / math.sqrt(2.0)), 6)
        expected.append(dense_part + (_sidak(lexical_tail(b), 6) if b > 0 else 0.0))
    got = significance_scores(np.array([cos]), np.array([bm25]), np.array(alive))
    assert got.shape == (1, 7) and got[0, 6] == -np.inf  # a dead row is never ranked
    np.testing.assert_allclose(got[0, :6], expected, rtol=1e-9)
    one_d = significance_scores(np.array(cos), np.array(bm25), np.array(alive))
    np.testing.assert_allclose(one_d[:6], expected, rtol=1e-9)  # one query as a 1-d array
    no_words = significance_scores(np.array(cos[:6]), np.zeros(6))  # stopwords only: the cosines' part alone
    np.testing.assert_allclose(no_words, [_sidak(0.5 * math.erfc((c - mean) / sd / math.sqrt(2.0)), 6)
                                          for c in cos[:6]], rtol=1e-9)
    flat = significance_scores(np.full(6, 0.3), np.array(bm25[:6]))  # equal cosines single nothing out
    np.testing.assert_allclose(flat, [(_sidak(lexical_tail(b), 6) if b > 0 else 0.0) for b in bm25[:6]], rtol=1e-9)
    with pytest.raises(ValueError):
        significance_scores(np.zeros((1, 3)), np.zeros((1, 2)))


def test_best_of_n_surprisal_is_minus_log_n_p_far_out_and_finite() -> None:
    n = 1000
    assert best_of_n_surprisal(np.array([math.log(0.01)]), n)[0] == pytest.approx(_sidak(0.01, n), rel=1e-12)
    assert best_of_n_surprisal(np.array([-800.0]), n)[0] == pytest.approx(800.0 - math.log(n))  # p underflows
    assert best_of_n_surprisal(np.array([0.0]), n)[0] == 0.0  # p = 1: no evidence
    assert best_of_n_surprisal(np.array([math.log(0.5)]), n)[0] == pytest.approx(0.5**n, rel=1e-9)  # no underflow


def test_significance_lets_the_signal_that_singles_a_passage_out_decide() -> None:
    """Passage 0 has the best cosine, passage 1 the best BM25 score. Where the cosines single passage 0 out
    (far above the rest) and BM25 only slightly prefers passage 1 over many matches, 0 ranks first; where the
    cosines are a close race (passage 0 barely ahead, as MiniLM on release notes that all read alike) and only
    passage 1 holds the query's rare word, 1 ranks first. A fixed share (cosine + 0.2 x BM25 / best) ranks
    passage 0 first in both."""
    rng = np.random.default_rng(3)
    bulk = 0.3 + 0.05 * rng.standard_normal(200)
    clear_cos = bulk.copy()
    clear_cos[0], clear_cos[1] = 0.75, 0.40
    clear_bm25 = 2.0 + 0.5 * rng.standard_normal(200).clip(-3, 3)
    clear_bm25[0], clear_bm25[1] = clear_bm25.max() * 0.95, clear_bm25.max() * 1.1
    race_cos = bulk.copy()
    race_cos[0], race_cos[1] = bulk.max() + 0.01, 0.18  # just ahead of the bulk's best
    race_bm25 = np.where(rng.random(200) < 0.5, 1.0 + 0.3 * rng.random(200), 0.0)
    race_bm25[0], race_bm25[1] = 1.2, 9.0
    fused = significance_scores(np.vstack([clear_cos, race_cos]), np.vstack([clear_bm25, race_bm25]))
    assert int(np.argmax(fused[0])) == 0 and int(np.argmax(fused[1])) == 1
    weighted = hybrid_scores(np.vstack([clear_cos, race_cos]), np.vstack([clear_bm25, race_bm25]), 0.2)
    assert int(np.argmax(weighted[0])) == 0 and int(np.argmax(weighted[1])) == 0


def test_hybrid_ranks_by_significance_by_default(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index(NOTES)
        query = "which exporter is in xq-7?"
        dense, bm25 = _all_scores(memory, query, "dense"), _all_scores(memory, query, "bm25")
        ids = sorted(dense)
        fused = significance_scores(np.array([dense[i] for i in ids]), np.array([bm25.get(i, 0.0) for i in ids]))
        oracle = dict(zip(ids, fused.tolist()))
        r = memory.retrieve(query, top_k=4, method="hybrid")[0]
    assert r.method == "hybrid" and r.signals == "dense cosine + BM25"
    expected = sorted(oracle, key=lambda pid: -oracle[pid])
    assert [p.id for p in r.passages] == expected
    assert [p.score for p in r.passages] == pytest.approx([oracle[pid] for pid in expected])
    assert memory.config.retrieve.fusion == "significance"


def _all_scores(memory: Memory, query: str, method: str) -> dict[str, float]:
    return {p.id: p.score for p in memory.retrieve(query, top_k=100, method=method)[0].passages}


@pytest.mark.parametrize("weight", [0.2, 1.0])
def test_weighted_hybrid_ranks_by_cosine_plus_the_weighed_bm25_share(tmp_path: Path, weight: float) -> None:
    config = MemoryConfig(retrieve=RetrieveConfig(lexical_weight=weight, fusion="weighted"))
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
    """The prior is built from the weighted hybrid scores (whatever `fusion` says, which ranks passage scores
    alone): with lexical_weight 0 the result is the dense-prior ranking; the first passage is the first
    stage's best in each case (dense_first)."""
    query = "Who founded Acme Tools?"
    results = {}
    for weight in (0.0, 0.2):
        config = MemoryConfig(retrieve=RetrieveConfig(lexical_weight=weight))
        with Memory(tmp_path / f"m{weight}", embedder=HashEmbedder(), config=config) as memory:
            memory.index(DOCS, extractions=EXTRACTIONS)
            results[weight] = memory.retrieve(query, top_k=5)[0]
            weighted = RetrieveConfig(lexical_weight=weight, fusion="weighted")  # the first stage's own score
            first = memory.retrieve(query, top_k=1, method="hybrid" if weight else "dense", config=weighted)
            first_id = first[0].passages[0].id
        assert results[weight].method == "hipporag2" and results[weight].passages[0].id == first_id
    assert results[0.2].signals.startswith("PageRank from ") and results[0.2].signals.endswith(
        "with a dense cosine + BM25 passage prior"
    )
    assert results[0.0].signals.endswith("with a dense cosine passage prior")
    assert [p.score for p in results[0.0].passages] != [p.score for p in results[0.2].passages]


def test_lexical_weight_out_of_range_is_refused() -> None:
    with pytest.raises(InputError, match="lexical_weight"):
        RetrieveConfig(lexical_weight=-0.1)


def test_an_unknown_fusion_is_refused_with_the_choices() -> None:
    with pytest.raises(InputError, match="fusion must be one of significance, weighted"):
        RetrieveConfig(fusion="rrf")
    with pytest.raises(InputError, match="fusion"):
        MemoryConfig.from_dict({"retrieve": {"fusion": 1}})


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
