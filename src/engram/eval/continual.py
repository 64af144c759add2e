"""The continual-learning experiment of the HippoRAG 2 paper (§6.3, figure 3), behind `engram eval --continual N`.

The corpus is split into N segments, each with its questions: questions that share a gold passage form one
group, each group goes to the segment with the fewest questions so far (ties: the lowest segment), and its gold
passages go with it; every other passage goes, in corpus order, to the segment with the fewest passages (ties:
the lowest). So the segments are as equal as the gold allows, every question's gold lies in its own segment,
and the split is deterministic.

The evaluated segment is indexed first, then the others arrive one by one, in order, into the same `Memory`
(incremental indexing, no rebuild); after each arrival the evaluated segment's questions are retrieved with
every method and scored. Library code: it returns results and never prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram.errors import InputError
from engram.eval.data import Question
from engram.eval.runner import MethodResult, MethodSpec, RunOptions, compare, run_method
from engram.extract.importers import ExtractionSet
from engram.memory import Memory
from engram.types import Document, Progress


@dataclass(frozen=True)
class Segment:
    documents: list[Document]
    questions: list[Question]


@dataclass
class Stage:
    """The memory after `segments` (1-based, in arrival order) were indexed, and each method's results."""

    segments: list[int]
    index: dict[str, Any]
    results: list[MethodResult] = field(default_factory=list)


def _question_groups(questions: Sequence[Question], known: set[str]) -> list[list[int]]:
    """Indexes of questions joined by shared gold passages (union-find), in order of their first question."""
    parent = list(range(len(questions)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, q in enumerate(questions):
        for doc_id in q.gold:
            if doc_id in known:
                j = first.setdefault(doc_id, i)
                parent[max(root(i), root(j))] = min(root(i), root(j))
    groups: dict[int, list[int]] = {}
    for i in range(len(questions)):
        groups.setdefault(root(i), []).append(i)
    return [groups[r] for r in sorted(groups)]


def _least(loads: Sequence[int]) -> int:
    return min(range(len(loads)), key=lambda s: (loads[s], s))


def split_segments(documents: Sequence[Document], questions: Sequence[Question], n: int) -> list[Segment]:
    """Split the corpus and its questions into `n` segments (see the module docstring)."""
    if n < 1:
        raise InputError("--continual needs at least 1 segment")
    if n > len(documents):
        raise InputError(f"cannot split {len(documents)} documents into {n} segments")
    known = {d.id for d in documents}
    owner: dict[str, int] = {}
    asked: list[list[int]] = [[] for _ in range(n)]
    sizes = [0] * n
    for group in _question_groups(questions, known):
        target = _least([len(a) for a in asked])
        asked[target] += group
        for doc_id in sorted({g for i in group for g in questions[i].gold if g in known}):
            owner[doc_id] = target
            sizes[target] += 1
    for doc in documents:
        if doc.id not in owner:
            owner[doc.id] = target = _least(sizes)
            sizes[target] += 1
    return [
        Segment(
            [d for d in documents if owner[d.id] == s],
            [questions[i] for i in sorted(asked[s])],
        )
        for s in range(n)
    ]


def arrival_order(n: int, evaluated: int) -> list[int]:
    """0-based segments in the order they are indexed: the evaluated one first, then the rest in order."""
    if not 0 <= evaluated < n:
        raise InputError(f"the evaluated segment must be between 1 and {n}")
    return [evaluated, *[s for s in range(n) if s != evaluated]]


def run_continual(
    memory: Memory,
    segments: Sequence[Segment],
    specs: Sequence[MethodSpec],
    *,
    evaluated: int = 0,
    extractions: ExtractionSet | None = None,
    options: RunOptions | None = None,
    progress: Progress | None = None,
    on_stage: Callable[[Stage], None] | None = None,
) -> list[Stage]:
    """Index the segments one by one into `memory` (the evaluated one first) and, after each, run every spec
    on the evaluated segment's questions. `on_stage` is called as each stage completes."""
    order = arrival_order(len(segments), evaluated)
    questions = segments[evaluated].questions
    if not questions:
        raise InputError(f"segment {evaluated + 1} has no questions to evaluate")
    stages: list[Stage] = []
    arrived: list[int] = []
    for s in order:
        start = time.perf_counter()
        memory.index(segments[s].documents, extractions=extractions, progress=progress)
        seconds = time.perf_counter() - start
        arrived.append(s + 1)
        stats = memory.stats()
        index: dict[str, Any] = {"seconds": round(seconds, 3)}
        index.update({k: stats[k] for k in ("documents", "passages", "phrases", "facts", "edges", "pending")})
        stage = Stage(list(arrived), index, [run_method(memory, questions, spec, options) for spec in specs])
        stages.append(stage)
        if on_stage is not None:
            on_stage(stage)
    return stages


def continual_result(
    segments: Sequence[Segment],
    stages: Sequence[Stage],
    evaluated: int,
    baseline: str = "dense",
    samples: int = 10_000,
) -> dict[str, Any]:
    """The JSON-ready summary: the segments, and per stage the index size and each method's summary (with
    the paired bootstrap against `baseline`)."""
    return {
        "evaluated_segment": evaluated + 1,
        "segments": [
            {"segment": i + 1, "documents": len(s.documents), "questions": len(s.questions)}
            for i, s in enumerate(segments)
        ],
        "stages": [
            {
                "stage": n,
                "segments": stage.segments,
                "index": stage.index,
                "methods": {r.spec.name: r.summary for r in stage.results},
                "comparisons": compare(stage.results, baseline, samples=samples) if samples else [],
            }
            for n, stage in enumerate(stages, start=1)
        ],
    }


def continual_details(stages: Sequence[Stage]) -> list[dict[str, Any]]:
    """Per-question rows of every stage (the runner's details, with the stage number)."""
    return [{"stage": n, **row} for n, stage in enumerate(stages, start=1) for r in stage.results for row in r.details]


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "–"


def continual_table(result: dict[str, Any], ks: Sequence[str] = ("2", "5")) -> str:
    """A markdown table: one row per stage, recall@k of each method (and EM/F1 when answered)."""
    stages = result["stages"]
    names = list(stages[0]["methods"]) if stages else []
    answered = any("f1" in m for s in stages for m in s["methods"].values())
    header = ["stage", "segments", "documents", "passages"]
    header += [f"{name} R@{k}" for name in names for k in ks]
    header += [f"{name} F1" for name in names] if answered else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in stages:
        cells = [str(s["stage"]), "+".join(map(str, s["segments"])), str(s["index"]["documents"])]
        cells.append(str(s["index"]["passages"]))
        cells += [_fmt(s["methods"][name]["recall"].get(k)) for name in names for k in ks]
        cells += [_fmt(s["methods"][name].get("f1")) for name in names] if answered else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
