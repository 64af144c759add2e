"""Loaders for the JSONL corpus and question files of `engram eval` (the shared data's format)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.errors import InputError
from engram.types import Document


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answers: list[str] = field(default_factory=list)
    gold: list[str] = field(default_factory=list)
    hops: str | None = None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise InputError(f"{path}:{number}: each line must be a JSON object")
            rows.append(row)
    return rows


def load_corpus(path: str | Path) -> list[Document]:
    """Rows {"id", "text", "title"?, ...}; other keys become metadata. A .json file may hold a list of rows
    (rows without "id" get "<file stem>-<n>")."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read {path} as JSON: {exc}") from exc
        rows = data if isinstance(data, list) else [data]
    else:
        rows = read_jsonl(path)
    docs = []
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise InputError(f"{path}: row {n + 1} needs a 'text' string")
        doc_id = str(row.get("id") or f"{path.stem}-{n}")
        meta = {k: v for k, v in row.items() if k not in ("id", "text", "title")}
        docs.append(Document(doc_id, row["text"], row.get("title"), meta))
    return docs


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
