"""Named entities of a query, for HippoRAG 1 and the NER-to-node ablation: from an LLM (our own prompt,
JSON output, one repair retry) or from a file written beforehand."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from engram.errors import ExtractionError, InputError
from engram.llm.base import ChatModel, Message
from engram.llm.failures import LLMTruncatedError
from engram.llm.jsonparse import echo, parse_json_object

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


def _entities(reply: str) -> list[str]:
    raw = parse_json_object(reply).get("entities")
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
    messages = query_ner_messages(query)
    for attempt in range(2):
        try:
            reply = chat.complete(messages, json=True)
        except LLMTruncatedError as error:
            reply, reason = error.text, "it was cut off at the length limit"
        else:
            try:
                return _entities(reply)
            except ExtractionError as error:
                reason = str(error)
        logger.debug("unreadable query NER reply (attempt %d): %s", attempt + 1, reason)
        messages = [
            *messages,
            {"role": "assistant", "content": echo(reply)},
            {"role": "user", "content": f"Your reply could not be used: {reason}. Reply with the JSON object only."},
        ]
    return []


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
