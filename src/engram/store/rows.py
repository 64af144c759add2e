"""The rows every store backend returns: a passage with its document's metadata, an extraction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PassageRow:
    id: str
    doc_id: str
    title: str | None
    text: str
    content_hash: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class ExtractionRow:
    """`source` names who made it: an LLM extractor's identity ("MODEL PROMPT-VERSION"), "import:..." or the
    offline extractor's identity."""

    status: str
    entities: list[str]
    triples: list[list[Any]]
    error: str | None
    source: str = ""
