"""Retrieval metrics: recall@k and all-evidence recall@k."""

from __future__ import annotations

from collections.abc import Sequence


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
