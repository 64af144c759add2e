"""RAPTOR's one LLM request, in engram's own words: the summary of a cluster of tree nodes (passages at the first
layer, summaries above). The reply is a JSON object read with the ask-for-JSON-with-one-repair helper
(`engram.llm.json_reply`), so an unusable reply is never cached and is asked again by the next sync."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engram.errors import ExtractionError
from engram.llm.base import Message

SUMMARY_SYSTEM = """You write one node of a summary tree that a search engine reads.
You get a group of texts that were clustered together because they are about related things. Write one
summary of about 80 words that keeps the specific names, dates, numbers and relations the texts state and
says what ties them together. Use only what the texts say; do not add outside knowledge.
Reply with one JSON object: {"summary": "..."}"""


def summary_messages(texts: Sequence[str]) -> list[Message]:
    """The request for a cluster whose node texts are `texts`, in the order given (callers order them by node
    id, so the same cluster always sends the same request)."""
    numbered = "\n\n".join(f"Text {i}:\n{t}" for i, t in enumerate(texts, start=1))
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": numbered}]


def read_summary(obj: dict[str, Any]) -> str:
    text = obj.get("summary")
    if not isinstance(text, str) or not text.strip():
        raise ExtractionError('the reply needs a non-empty "summary" string')
    return text.strip()
