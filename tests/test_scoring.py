import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.retrieve import scoring
from engram.retrieve.scoring import min_max, phrase_seeds, reset_vector, top_k


def test_min_max_and_constant_vectors() -> None:
    assert np.allclose(min_max([1.0, 3.0, 2.0]), [0.0, 1.0, 0.5])
    assert np.allclose(min_max([2.0, 2.0]), [1.0, 1.0])
    assert min_max([]).size == 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([-np.inf, 0.0, 0.25, 0.5, 1.0, -1.0]) | st.floats(-5, 5), max_size=40),
    st.integers(0, 45),
    st.booleans(),
)
def test_top_k_is_the_sorted_order(scores: list[float], k: int, ranked: bool) -> None:
    """Oracle: every finite-or-+inf row sorted by score (descending), then by tiebreak, the first k."""
    tiebreak = np.random.default_rng(len(scores)).permutation(len(scores)) if ranked else np.arange(len(scores))
    want = sorted((i for i, v in enumerate(scores) if v != -np.inf), key=lambda i: (-scores[i], tiebreak[i]))[:k]
    assert top_k(scores, k, tiebreak if ranked else None).tolist() == want


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([-np.inf, np.inf, 0.0, 0.25, 0.5, 1.0, -1.0]) | st.floats(-5, 5), max_size=60),
    st.integers(0, 20),
    st.sampled_from([1, 2, 3, 7]),
)
def test_top_k_through_block_maxima_is_the_sorted_order(scores: list[float], k: int, block: int) -> None:
    """The large-array path (the k-th largest bounded by block maxima, blocks of a few rows here, a partial
    last block, many ties and -inf rows) against the same oracle."""
    tiebreak = np.random.default_rng(len(scores)).permutation(len(scores))
    want = sorted((i for i, v in enumerate(scores) if v != -np.inf), key=lambda i: (-scores[i], tiebreak[i]))[:k]
    old = scoring.BLOCK, scoring.BLOCKED_FROM
    scoring.BLOCK, scoring.BLOCKED_FROM = block, 0
    try:
        assert top_k(scores, k, tiebreak).tolist() == want
    finally:
        scoring.BLOCK, scoring.BLOCKED_FROM = old


def test_top_k_is_deterministic_on_ties() -> None:
    assert top_k([0.1, 0.5, 0.5, 0.9], 3).tolist() == [3, 1, 2]
    assert top_k([0.3], 5).tolist() == [0]
    assert top_k([], 2).tolist() == []


def test_phrase_seeds_use_mean_fact_score_and_cap() -> None:
    fact_phrases = np.array([[0, 1], [1, 2], [3, 4], [5, 6]])
    scores = np.array([1.0, 0.5, 0.8, 0.2])
    phrases, weights = phrase_seeds(np.array([0, 1, 2]), scores, fact_phrases, max_seeds=3)
    # phrase 1 is in facts 0 and 1: mean 0.75; phrase 0: 1.0; phrases 3, 4: 0.8; phrase 2: 0.5
    assert phrases.tolist() == [0, 3, 4]
    assert np.allclose(weights, [1.0, 0.8, 0.8])
    phrases, weights = phrase_seeds(np.array([0, 1]), scores, fact_phrases, max_seeds=5)
    assert dict(zip(phrases.tolist(), weights.tolist())) == {0: 1.0, 1: 0.75, 2: 0.5}


def test_node_specificity_divides_by_passage_count() -> None:
    fact_phrases = np.array([[0, 1]])
    phrases, weights = phrase_seeds(np.array([0]), np.array([0.9]), fact_phrases, 5, passage_counts=np.array([3, 1]))
    assert phrases.tolist() == [1, 0]
    assert np.allclose(weights, [0.9, 0.3])


def test_no_kept_facts_gives_no_seeds() -> None:
    phrases, weights = phrase_seeds(np.array([], dtype=np.int64), np.array([0.5]), np.array([[0, 1]]))
    assert phrases.size == 0 and weights.size == 0


def test_reset_vector_weights_passages() -> None:
    reset = reset_vector(3, np.array([1]), np.array([0.7]), np.array([0.2, 0.6, 0.4]), passage_weight=0.05)
    assert np.allclose(reset, [0.0, 0.7, 0.0, 0.0, 0.05, 0.025])
