"""Retrieval and answer metrics: recall@k, all-evidence recall@k, exact match and token F1.

Answers are compared after the usual normalisation of extractive QA evaluation: lower case, punctuation
deleted, the articles "a", "an" and "the" removed, whitespace collapsed. A prediction is scored against
every gold alias and keeps its best score.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def recall_at_k(retrieved: Sequence[str], gold: Sequence[str], k: int) -> float:
    """|gold ∩ top k| / |gold| (0 when there is no gold)."""
    wanted = set(gold)
    if not wanted:
        return 0.0
    return len(wanted & set(retrieved[:k])) / len(wanted)


def all_recall_at_k(retrieved: Sequence[str], gold: Sequence[str], k: int) -> float:
    """1 when every gold passage is in the top k, else 0."""
    wanted = set(gold)
    return float(bool(wanted) and wanted <= set(retrieved[:k]))


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def normalize_answer(text: str) -> str:
    """Lower case, delete punctuation (ASCII, as SQuAD does, and Unicode punctuation such as curly quotes and
    dashes), remove the articles a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION and not unicodedata.category(ch).startswith("P"))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1 when the normalised prediction equals a normalised gold answer, else 0 (0 without gold)."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(g) for g in golds))


def _f1(prediction: str, gold: str) -> float:
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not wanted:
        return float(predicted == wanted)
    common = sum((Counter(predicted) & Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """Best bag-of-tokens F1 between the normalised prediction and any gold answer (0 without gold). Two
    answers that are both empty after normalisation score 1; one empty and one not, 0."""
    return max((_f1(prediction, g) for g in golds), default=0.0)


def group_means(values: Sequence[float], groups: Sequence[str | None]) -> dict[str, tuple[int, float]]:
    """Per group label: (count, mean). Questions without a label go to "other"."""
    buckets: dict[str, list[float]] = {}
    for value, group in zip(values, groups):
        buckets.setdefault(group or "other", []).append(value)
    return {name: (len(items), mean(items)) for name, items in sorted(buckets.items())}


def recall_table(
    ranked: Sequence[Sequence[str]], golds: Sequence[Sequence[str]], ks: Sequence[int]
) -> Mapping[int, list[float]]:
    """Per k, the recall@k of every question."""
    return {k: [recall_at_k(r, g, k) for r, g in zip(ranked, golds)] for k in ks}
