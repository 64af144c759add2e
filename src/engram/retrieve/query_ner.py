"""Named entities of a query, for HippoRAG 1 and the NER-to-node ablation: from an LLM (our own prompt,
JSON output, one repair retry) or from a file written beforehand."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engram.errors import ExtractionError, InputError
from engram.llm import aio
from engram.llm.base import ChatModel, Message, concurrency_of
from engram.llm.json_reply import JsonRequest, aask_json

logger = logging.getLogger(__name__)

QUERY_NER_SYSTEM = (
    "You pick out the named entities a question mentions, so they can be looked up in a knowledge graph. "
    "List the specific people, organisations, places, works, events, products, dates and numbers the "
    "question names, each once and written as in the question. Leave out generic words such as 'country' "
    "or 'author'. Reply with a JSON object only, shaped {\"entities\": [\"...\", \"...\"]}."
)

_EXAMPLE_QUESTION = "Which river flows through the city where the composer of the Tallis Fantasia was born?"
_EXAMPLE_ENTITIES = ["Tallis Fantasia"]

# query text -> its entities
QueryEntities = Mapping[str, Sequence[str]]


def query_ner_messages(query: str) -> list[Message]:
    return [
        {"role": "system", "content": QUERY_NER_SYSTEM},
        {"role": "user", "content": f"Question: {_EXAMPLE_QUESTION}"},
        {"role": "assistant", "content": json.dumps({"entities": _EXAMPLE_ENTITIES})},
        {"role": "user", "content": f"Question: {query}"},
    ]


QUERY_NER_REQUEST = JsonRequest(what="query NER reply")


def _entities(reply: dict[str, Any]) -> list[str]:
    raw = reply.get("entities")
    if not isinstance(raw, list):
        raise ExtractionError('the JSON object has no "entities" list')
    out: list[str] = []
    for item in raw:
        if isinstance(item, (str, int, float)) and not isinstance(item, bool) and str(item).strip():
            text = str(item).strip()
            if text not in out:
                out.append(text)
    return out


def query_entities(chat: ChatModel, query: str) -> list[str]:
    """The entities the LLM finds in `query`; [] when its reply is unreadable twice. LLM call failures
    (`LLMError`) propagate."""
    return aio.run(aquery_entities(chat, query))


async def aquery_entities(chat: ChatModel, query: str) -> list[str]:
    """`query_entities` as a coroutine on the shared loop."""
    try:
        return await aask_json(chat, query_ner_messages(query), _entities, QUERY_NER_REQUEST)
    except ExtractionError:
        return []


def query_entities_many(chat: ChatModel, queries: Sequence[str]) -> list[list[str]]:
    """`query_entities` of each query, their calls run concurrently (as many as the chat model takes)."""
    return aio.run(_many(chat, list(queries)))


async def _many(chat: ChatModel, queries: list[str]) -> list[list[str]]:
    slots = asyncio.Semaphore(concurrency_of(chat))

    async def one(query: str) -> list[str]:
        async with slots:
            return await aquery_entities(chat, query)

    return list(await asyncio.gather(*(one(q) for q in queries)))


def load_query_entities(path: str | Path) -> dict[str, list[str]]:
    """Read a query-entities file: JSONL rows {"question" and/or "id", "entities": [...]}, or one JSON
    object {question or id: [entities]}. Keys are kept as given (question texts and ids both)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    try:
        data: object = json.loads(text)
    except json.JSONDecodeError:
        data = None  # JSONL (more than one line)
    if isinstance(data, dict) and "entities" not in data and all(isinstance(v, list) for v in data.values()):
        return {str(k): [str(e) for e in v if str(e).strip()] for k, v in data.items()}
    if isinstance(data, dict):
        data = [data]
    rows = data if isinstance(data, list) else _jsonl(path, text)
    return _from_rows(path, rows)


def _jsonl(path: Path, text: str) -> list[object]:
    rows: list[object] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
    return rows


def _from_rows(path: Path, rows: Sequence[object]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for number, row in enumerate(rows, start=1):
        entities = row.get("entities", row.get("named_entities")) if isinstance(row, dict) else None
        if not isinstance(row, dict) or not isinstance(entities, list):
            raise InputError(f"{path}: row {number} needs an 'entities' list")
        keys = [str(row[k]) for k in ("question", "id") if isinstance(row.get(k), (str, int))]
        if not keys:
            raise InputError(f"{path}: row {number} needs a 'question' or an 'id'")
        for key in keys:
            out[key] = [str(e) for e in entities if str(e).strip()]
    return out
