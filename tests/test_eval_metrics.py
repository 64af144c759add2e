"""Metrics against hand-computed cases, including answer-normalisation edge cases, and the bootstrap."""

from __future__ import annotations

import pytest

from engram.eval.metrics import (
    all_recall_at_k,
    exact_match,
    group_means,
    normalize_answer,
    recall_at_k,
    token_f1,
)
from engram.eval.stats import paired_bootstrap


def test_recall_and_all_evidence_by_hand() -> None:
    ranked = ["a", "x", "b", "y", "c"]
    gold = ["a", "b", "c"]
    assert recall_at_k(ranked, gold, 1) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, gold, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, gold, 3) == pytest.approx(2 / 3)
    assert recall_at_k(ranked, gold, 5) == 1.0
    assert recall_at_k(ranked, gold, 20) == 1.0  # k beyond the list
    assert all_recall_at_k(ranked, gold, 3) == 0.0
    assert all_recall_at_k(ranked, gold, 5) == 1.0
    assert recall_at_k(ranked, [], 5) == 0.0 and all_recall_at_k(ranked, [], 5) == 0.0
    assert recall_at_k(ranked, ["a", "a"], 1) == 1.0  # duplicate gold counts once


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   apple, a day!  ", "apple day"),
        ("U.S.", "us"),
        ("Don't", "dont"),
        ("“Quoted” — text…", "quoted text"),  # Unicode punctuation is punctuation too
        ("Theatre", "theatre"),  # "the" only as a word
        ("A", ""),
        ("", ""),
        ("1,000", "1000"),
        ("São Paulo", "são paulo"),  # letters with accents stay
    ],
)
def test_normalize_answer(raw: str, normal: str) -> None:
    assert normalize_answer(raw) == normal


def test_exact_match_with_aliases() -> None:
    assert exact_match("the Norway", ["Norway", "NO"]) == 1.0
    assert exact_match("no", ["Norway", "NO"]) == 1.0
    assert exact_match("Norway.", ["Kingdom of Norway"]) == 0.0
    assert exact_match("anything", []) == 0.0


def test_token_f1_by_hand() -> None:
    # prediction tokens: [jerry, lee, lewis, singer]; gold: [jerry, lee, lewis] -> P 3/4, R 1, F1 6/7
    assert token_f1("Jerry Lee Lewis, singer", ["Jerry Lee Lewis"]) == pytest.approx(6 / 7)
    # best alias wins: "karl renner" vs "renner" -> P 1/2 R 1 = 2/3; vs "karl renner" = 1
    assert token_f1("Karl Renner", ["Renner", "Karl Renner"]) == 1.0
    # repeated tokens count with multiplicity: pred [a1, a1, b] (articles removed), gold [a1, b, b]
    assert token_f1("a1 a1 b", ["a1 b b"]) == pytest.approx(2 / 3)
    assert token_f1("The", ["a"]) == 1.0  # both empty after normalisation
    assert token_f1("The", ["Paris"]) == 0.0
    assert token_f1("London", ["Paris"]) == 0.0
    assert token_f1("x", []) == 0.0


def test_group_means() -> None:
    groups = group_means([1.0, 0.0, 0.5, 1.0], ["2hop", "2hop", "3hop1", None])
    assert groups == {"2hop": (2, 0.5), "3hop1": (1, 0.5), "other": (1, 1.0)}


def test_paired_bootstrap_is_deterministic_and_sensible() -> None:
    better = [1.0] * 30 + [0.0] * 10
    worse = [0.0] * 30 + [0.0] * 10
    test = paired_bootstrap(better, worse, samples=2000, seed=1)
    assert test.delta == pytest.approx(0.75)
    assert test.p_value < 0.001 and test.p_greater < 0.001
    assert test.ci_low <= 0.75 <= test.ci_high
    assert paired_bootstrap(better, worse, samples=2000, seed=1) == test  # same seed, same answer
    same = paired_bootstrap(worse, worse, samples=500)
    assert same.delta == 0.0 and same.p_value == 1.0
    # a tiny, noisy difference is not significant
    a = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    b = [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    noisy = paired_bootstrap(a, b, samples=4000, seed=0)
    assert noisy.delta == pytest.approx(1 / 8) and noisy.p_value > 0.3
    # one-sided p for "a better than b" is 1 when a is worse
    assert paired_bootstrap(b, a, samples=500).p_greater == 1.0


def test_paired_bootstrap_rejects_unpaired() -> None:
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 0.0])
    assert paired_bootstrap([], []).p_value == 1.0
