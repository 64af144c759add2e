"""Corpus files in: JSONL rows {"id", "title", "text", ...} (or a .json list of them) as Documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engram.errors import InputError
from engram.types import Document


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
            except RecursionError as exc:
                raise InputError(f"{path}:{number}: JSON nested too deeply to read") from exc
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
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read {path} as JSON: {exc}") from exc
        except RecursionError as exc:
            raise InputError(f"cannot read {path}: JSON nested too deeply") from exc
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
