"""engram's BM25 against bm25s (the second implementation): the same scores on random corpora with dead rows,
and an index built from an earlier one's tokens equal to one built from scratch."""

from __future__ import annotations

import random

import bm25s
import numpy as np
import pytest

from engram.index.view.bm25 import BM25Index

WORDS = ["alpha", "beta", "gamma", "delta", "the", "of", "range-diff", "git", "2.19", "maintenance", "x", "Ünïcode"]


def _corpus(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 30))) + f" w{rng.randint(0, 40)}" for _ in range(n)]


def _bm25s_scores(texts: list[str], alive: np.ndarray, query: str) -> np.ndarray:
    rows = np.flatnonzero(alive)
    model = bm25s.BM25()
    model.index(bm25s.tokenize([texts[i] for i in rows], stopwords="en", show_progress=False), show_progress=False)
    words = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
    out = np.full(len(texts), -np.inf)
    known = [w for w in words if w in model.vocab_dict]
    out[rows] = model.get_scores(known) if known else 0.0
    return out


@pytest.mark.parametrize("seed", range(5))
def test_scores_match_bm25s(seed: int) -> None:
    rng = random.Random(seed)
    texts = _corpus(rng, 60)
    alive = np.array([rng.random() > 0.2 for _ in texts])
    index = BM25Index(texts, alive)
    queries = ["alpha git", "maintenance maintenance beta w3", "range-diff 2.19", "the of", "nothing", "ÜNÏCODE"]
    for query in queries:
        ours, theirs = index.scores(query), _bm25s_scores(texts, alive, query)
        assert np.array_equal(np.isinf(ours), ~alive)
        np.testing.assert_allclose(ours[alive], theirs[alive], rtol=1e-5, atol=1e-6)


def test_an_index_built_from_an_earlier_one_equals_a_fresh_one() -> None:
    rng = random.Random(7)
    texts = _corpus(rng, 40)
    keys = [f"p{i}" for i in range(40)]
    first = BM25Index(texts[:30], None, keys[:30])
    changed = list(texts)
    changed[3] = "gamma delta git"  # the same key, another text: tokenised again
    alive = np.ones(40, dtype=bool)
    alive[5] = False
    following = BM25Index(changed, alive, keys, previous=first)
    fresh = BM25Index(changed, alive, keys)
    for query in ["gamma git alpha w7 beta", "alpha w7", "delta delta", "maintenance"]:
        assert following.scores(query).tolist() == fresh.scores(query).tolist()  # to the bit
    alone = BM25Index(texts[:30], None, keys[:30])  # the vocabulary grew for `following`: `first` is unchanged
    np.testing.assert_allclose(first.scores("gamma delta git"), alone.scores("gamma delta git"), rtol=1e-12)


def test_empty_and_stopword_only() -> None:
    assert BM25Index([]).scores("alpha").size == 0
    index = BM25Index(["alpha beta", "gamma"], np.array([True, False]))
    assert index.scores("the of").tolist() == [0.0, -np.inf]  # only stopwords: nothing matches, nothing fails
    assert BM25Index(["", "the"]).scores("alpha").tolist() == [0.0, 0.0]
