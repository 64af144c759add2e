import numpy as np
import pytest

from engram.graph.build import assemble_adjacency, build_tables, normalize_triple, synonym_edges


def test_normalize_triple_rejects_malformed() -> None:
    assert normalize_triple(["A", "b", "C"]) == ("a", "b", "c")
    assert normalize_triple(["A", "b"]) is None
    assert normalize_triple(["A", "", "C"]) is None
    assert normalize_triple(["A", "b", "..."]) is None
    assert normalize_triple(["A", "born in", 1950]) == ("a", "born in", "1950")


def hand_built():
    passages = [
        [["Alice", "founded", "Acme"], ["Acme", "based in", "Lyon"], ["bad"]],
        [["alice", "founded", "ACME"], ["Alice", "is", "Alice"]],
        [["Lyon", "is in", "France"]],
    ]
    return build_tables(passages)


def test_tables_merge_phrases_and_count_support() -> None:
    t = hand_built()
    assert t.phrases == ["acme", "alice", "france", "lyon"]
    assert ("alice", "founded", "acme") in t.facts
    assert len(t.facts) == 4  # the founded triple appears twice but is one fact
    assert t.dropped == 1
    support = {tuple(pair): w for pair, w in zip(t.relation.tolist(), t.relation_support)}
    assert support == {(0, 1): 2.0, (0, 3): 1.0, (2, 3): 1.0}  # alice-acme stated by two passages
    assert sorted(map(tuple, t.context.tolist())) == [(0, 0), (0, 1), (0, 3), (1, 0), (1, 1), (2, 2), (2, 3)]


def test_adjacency_has_each_edge_once_with_documented_weights() -> None:
    t = hand_built()
    syn = (np.array([[2, 3]]), np.array([0.9]))  # pretend france ~ lyon are synonyms
    a = assemble_adjacency(t, n_passages=3, synonyms=syn, context_weight=0.5).toarray()
    assert np.allclose(a, a.T)
    assert a[0, 1] == 2.0  # relation: support
    assert a[2, 3] == pytest.approx(1.0 + 0.9)  # relation and synonym on one pair add
    assert a[4 + 0, 0] == 0.5 and a[4 + 2, 2] == 0.5  # context edges passage <-> phrase
    assert a[4 + 2, 0] == 0.0
    n_edges = np.count_nonzero(np.triu(a))
    assert n_edges == 3 + 7  # three phrase pairs + seven context edges


def test_synonym_edges_threshold_and_top_k() -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(size=(5, 16))
    vecs = np.concatenate([base, base + 0.01 * rng.normal(size=base.shape), base + 0.02 * rng.normal(size=base.shape)])
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    pairs, sims = synonym_edges(vecs, threshold=0.8, top_k=5, block=4)
    expected = {(i, i + 5) for i in range(5)} | {(i, i + 10) for i in range(5)} | {(i + 5, i + 10) for i in range(5)}
    assert set(map(tuple, pairs.tolist())) == expected
    assert np.all(sims >= 0.8)
    pairs1, _ = synonym_edges(vecs, threshold=0.8, top_k=1, block=3)
    # each row keeps one neighbour; a pair stays if either end keeps it
    assert 5 <= len(pairs1) < len(expected)
