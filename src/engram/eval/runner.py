"""The evaluation runner behind `engram eval`: index a corpus, retrieve with each method, measure recall."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from engram.eval.data import Question
from engram.eval.metrics import all_recall_at_k, mean, recall_at_k
from engram.memory import Memory
from engram.types import Retrieval

KS = (1, 2, 5, 10)
ALL_KS = (2, 5, 10)


def ranked_documents(retrieval: Retrieval) -> list[str]:
    """Document ids in rank order (a chunked document counts once, at its best chunk)."""
    seen: list[str] = []
    for p in retrieval.passages:
        if p.doc_id not in seen:
            seen.append(p.doc_id)
    return seen


def score_method(
    memory: Memory, questions: Sequence[Question], method: str, ks: Sequence[int] = KS
) -> tuple[dict[str, Any], list[Retrieval]]:
    depth = max(ks) * 2
    start = time.perf_counter()
    results = memory.retrieve([q.question for q in questions], top_k=depth, method=method)
    seconds = time.perf_counter() - start
    ranked = [ranked_documents(r) for r in results]
    summary = {
        "recall": {str(k): round(mean([recall_at_k(d, q.gold, k) for d, q in zip(ranked, questions)]), 4) for k in ks},
        "all_recall": {
            str(k): round(mean([all_recall_at_k(d, q.gold, k) for d, q in zip(ranked, questions)]), 4) for k in ALL_KS
        },
        "seconds_per_query": round(seconds / max(len(questions), 1), 5),
        "questions": len(questions),
    }
    fallbacks = sum(1 for r in results if r.method != method)
    if fallbacks:
        summary["dense_fallbacks"] = fallbacks
    return summary, results
