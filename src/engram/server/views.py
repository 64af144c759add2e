"""JSON shapes of engram's results, shared by REST, MCP and the web page."""

from __future__ import annotations

import bisect
from dataclasses import asdict
from typing import Any

from engram.types import Answer, Fact, IndexReport, Retrieval, RetrievedPassage


def passage_json(p: RetrievedPassage) -> dict[str, Any]:
    return {"id": p.id, "doc_id": p.doc_id, "title": p.title, "text": p.text, "score": p.score, "metadata": p.metadata}


def fact_json(f: Fact) -> dict[str, Any]:
    return {"subject": f.subject, "relation": f.relation, "object": f.object, "score": f.score}


def retrieval_json(r: Retrieval, requested: str) -> dict[str, Any]:
    """A `Retrieval` with the why: candidate facts, the facts the filter kept, seed phrases and weights,
    whether the filter ran and whether (and why) a graph method fell back to dense ranking."""
    return {
        "query": r.query,
        "method": r.method,
        "requested_method": requested,
        "passages": [passage_json(p) for p in r.passages],
        "candidate_facts": [fact_json(f) for f in r.candidate_facts],
        "facts": [fact_json(f) for f in r.facts],
        "seeds": [{"phrase": s.phrase, "weight": s.weight} for s in r.seeds],
        "filtered": r.filtered,
        "fell_back": r.fell_back,
        "fallback_reason": r.fallback_reason or None,
        "pending": r.pending,
        "signals": r.signals,
    }


def answer_json(a: Answer) -> dict[str, Any]:
    return {
        "query": a.query,
        "answer": a.answer,
        "passages": [passage_json(p) for p in a.passages],
        "facts": [fact_json(f) for f in a.facts],
    }


def report_json(report: IndexReport) -> dict[str, Any]:
    return asdict(report)


def page_of(ids: list[str], prefix: str, limit: int, cursor: str | None) -> tuple[list[str], str | None, int]:
    """One page of sorted ids starting with `prefix`, after `cursor` (the last id of the previous page):
    (ids, next cursor or None, how many ids match the prefix)."""
    matching = sorted(i for i in ids if i.startswith(prefix))
    start = 0 if cursor is None else bisect.bisect_right(matching, cursor)
    page = matching[start : start + limit]
    more = start + limit < len(matching)
    return page, (page[-1] if more and page else None), len(matching)
