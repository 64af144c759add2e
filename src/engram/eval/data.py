"""Loaders for the JSONL corpus and question files of `engram eval` (the shared data's format)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engram.errors import InputError
from engram.ingest.corpus import load_corpus, read_jsonl

__all__ = ["Question", "load_corpus", "load_questions", "read_jsonl"]


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answers: list[str] = field(default_factory=list)
    gold: list[str] = field(default_factory=list)
    hops: str | None = None


def load_questions(path: str | Path) -> list[Question]:
    out = []
    for n, row in enumerate(read_jsonl(path), start=1):
        if not isinstance(row.get("question"), str):
            raise InputError(f"{path}: row {n} needs a 'question' string")
        out.append(
            Question(
                str(row.get("id", n)),
                row["question"],
                [str(a) for a in row.get("answers", [])],
                [str(g) for g in row.get("gold", [])],
                row.get("hops"),
            )
        )
    return out
