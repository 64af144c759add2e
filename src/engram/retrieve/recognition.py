"""The recognition-memory filter: an LLM keeps, among the candidate facts, those that bear on the query.

The prompt lists the candidates numbered, each as a JSON triple, and asks for the useful ones copied into
`{"facts": [[s, r, o], ...]}`. Copying lets every answer be checked: a returned triple counts only if it
equals a candidate after `normalize_phrase` on all three parts, and a bare number counts only as the
1-based position of a listed candidate (small models sometimes answer with the numbers). Anything else is
discarded; nothing is ever mapped to the "closest" candidate.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from engram.errors import ExtractionError, LLMConfigError, LLMError
from engram.llm import aio
from engram.llm.base import ChatModel, Message, concurrency_of
from engram.llm.failures import LLMTimeoutError, LLMUnreachableError
from engram.llm.json_reply import JsonRequest, aask_json
from engram.text import normalize_phrase
from engram.types import Triple

logger = logging.getLogger(__name__)

FILTER_SYSTEM = (
    "You decide which facts from a knowledge graph help answer a question. You get the question and a "
    "numbered list of candidate facts, each a [subject, relation, object] triple. Keep the facts that help "
    "answer it, directly or as one step of a chain of reasoning, and leave out the rest. Copy each kept "
    "fact exactly as it is written in the list. Keep none if none helps. Reply with a JSON object only, "
    'shaped {"facts": [["subject", "relation", "object"], ...]}.'
)

_EXAMPLE_QUESTION = "In which country was the designer of the Halvard Footbridge born?"
_EXAMPLE_CANDIDATES: list[Triple] = [
    ("Halvard Footbridge", "was designed by", "Ines Korsvik"),
    ("Halvard Footbridge", "opened in", "1994"),
    ("Ines Korsvik", "was born in", "Norway"),
    ("Oslo", "is the capital of", "Norway"),
]
_EXAMPLE_KEPT = [list(_EXAMPLE_CANDIDATES[0]), list(_EXAMPLE_CANDIDATES[2])]
FILTER_REQUEST = JsonRequest(
    what="recognition reply",
    cut_off="it was cut off at the length limit; keep fewer facts",
    again='Reply again with the JSON object only, shaped {"facts": [...]}.',
)


def _ask(query: str, candidates: Sequence[Triple]) -> str:
    listed = "\n".join(
        f"{number}. {json.dumps(list(fact), ensure_ascii=False)}" for number, fact in enumerate(candidates, 1)
    )
    return f"Question: {query}\n\nCandidate facts:\n{listed}"


def filter_messages(query: str, candidates: Sequence[Triple]) -> list[Message]:
    return [
        {"role": "system", "content": FILTER_SYSTEM},
        {"role": "user", "content": _ask(_EXAMPLE_QUESTION, _EXAMPLE_CANDIDATES)},
        {"role": "assistant", "content": json.dumps({"facts": _EXAMPLE_KEPT})},
        {"role": "user", "content": _ask(query, candidates)},
    ]


def _key(parts: Sequence[object]) -> tuple[str, str, str] | None:
    if len(parts) != 3 or not all(
        isinstance(p, (str, int, float)) and not isinstance(p, bool) for p in parts
    ):
        return None
    return (normalize_phrase(str(parts[0])), normalize_phrase(str(parts[1])), normalize_phrase(str(parts[2])))


def _kept_indices(reply: dict[str, Any], candidates: Sequence[Triple]) -> list[int]:
    """Indices of the candidates named in `reply`, in candidate order. Raises `ExtractionError` when the
    reply has no "facts" list."""
    raw = reply.get("facts")
    if not isinstance(raw, list):
        raise ExtractionError('the JSON object has no "facts" list')
    positions: dict[tuple[str, str, str], list[int]] = {}
    for index, fact in enumerate(candidates):
        key = _key(fact)
        if key is not None:
            positions.setdefault(key, []).append(index)
    kept: set[int] = set()
    for item in raw:
        if isinstance(item, int) and not isinstance(item, bool):
            if 1 <= item <= len(candidates):
                kept.add(item - 1)
            continue
        key = _key(item) if isinstance(item, (list, tuple)) else None
        matches = positions.get(key, []) if key is not None else []
        if not matches:
            logger.debug("recognition filter returned a fact that is not a candidate: %r", item)
        kept.update(matches)
    return sorted(kept)


def recognition_filter(chat: ChatModel, query: str, candidates: Sequence[Triple]) -> list[int] | None:
    """Indices (into `candidates`, ascending) of the facts the LLM keeps for `query`.

    `[]` means the filter ran and kept nothing. None means the filter is unavailable for this query: the
    reply was unreadable (or cut off) twice, so the caller should fall back to the unfiltered candidates.
    LLM call failures (`LLMError`, including `LLMConfigError`) propagate.
    """
    return aio.run(arecognition_filter(chat, query, candidates))


async def arecognition_filter(chat: ChatModel, query: str, candidates: Sequence[Triple]) -> list[int] | None:
    """`recognition_filter` as a coroutine on the shared loop."""
    if not candidates:
        return []
    try:
        return await aask_json(
            chat, filter_messages(query, candidates), lambda reply: _kept_indices(reply, candidates), FILTER_REQUEST
        )
    except ExtractionError:
        return None


class RecognitionFilter:
    """The filter over a batch of queries: their calls run concurrently (as many as the chat model takes).

    A failed call does not fail the retrieval: that query keeps its unfiltered candidates, a warning is
    logged and `skipped[query]` says why. Once the LLM timed out or could not be reached, the batch's
    remaining queries skip the filter at once (a user is waiting). `LLMConfigError` (bad model, key, URL)
    still propagates: it needs fixing, not hiding."""

    def __init__(self, chat: ChatModel) -> None:
        self.chat = chat
        self.skipped: dict[str, str] = {}

    def __call__(self, query: str, candidates: Sequence[Triple]) -> list[int] | None:
        return self.many([(query, candidates)])[0]

    def many(self, items: Sequence[tuple[str, Sequence[Triple]]]) -> list[list[int] | None]:
        return aio.run(self._many(list(items)))

    async def _many(self, items: list[tuple[str, Sequence[Triple]]]) -> list[list[int] | None]:
        slots = asyncio.Semaphore(concurrency_of(self.chat))
        down: list[str] = []

        async def one(query: str, candidates: Sequence[Triple]) -> list[int] | None:
            async with slots:
                if down:
                    self.skipped[query] = down[0]
                    return None
                try:
                    return await arecognition_filter(self.chat, query, candidates)
                except LLMConfigError:
                    raise
                except LLMError as error:
                    reason = f"the recognition filter did not run (unfiltered facts used): {error}"
                    logger.warning("%s", reason)
                    self.skipped[query] = reason
                    if isinstance(error, (LLMTimeoutError, LLMUnreachableError)):
                        down.append(reason)
                    return None

        return list(await asyncio.gather(*(one(q, c) for q, c in items)))
