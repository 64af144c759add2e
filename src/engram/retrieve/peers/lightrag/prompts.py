"""LightRAG's two LLM requests, in engram's own words: per chunk, entities and keyword-carrying relations (with
one "gleaning" request for what the first reply missed); per query, high- and low-level keywords. Replies are
JSON objects read leniently (`engram.llm.json_reply`: one repair request when a reply cannot be used)."""

from __future__ import annotations

from typing import Any

from engram.errors import ExtractionError
from engram.llm.base import Message
from engram.retrieve.peers.chunk_merge import ChunkGraph, RawEntity, RawRelation

PROMPT_VERSION = "lightrag/1"

EXTRACT_SYSTEM = """You turn a passage into a small knowledge graph.
List the entities the passage names (people, organisations, places, events, works, products, concepts, dates)
and the relations the passage states between them. Reply with one JSON object:
{"entities": [{"name": "...", "type": "...", "description": "..."}],
 "relations": [{"source": "...", "target": "...", "keywords": ["..."], "description": "...", "strength": 7}]}
- name: the entity as the passage writes it; type: one of person, organization, location, event, work,
  product, concept, date, other; description: what the passage says about the entity, in one or two sentences.
- source and target: names from your entity list. keywords: two to four words for the theme of the relation
  (e.g. "founding", "family tie", "rivalry"). description: why the two are related, from the passage.
  strength: how close the relation is, from 1 (loose) to 10 (direct and explicit).
Use only what the passage says. Reply with the JSON object only."""

GLEAN_REQUEST = (
    "Some entities or relations of the passage may be missing from your reply. Reply with a JSON object of the "
    "same shape that lists only the ones you missed (empty lists if none)."
)

KEYWORDS_SYSTEM = """You prepare a question for searching a knowledge graph.
Give two lists of keywords:
- high_level_keywords: the broad themes or concepts the question is about (e.g. "international trade policy");
- low_level_keywords: the specific entities, names, places, dates and details it mentions.
Reply with one JSON object: {"high_level_keywords": ["..."], "low_level_keywords": ["..."]}"""

TYPES = ("person", "organization", "location", "event", "work", "product", "concept", "date", "other")


def passage_block(title: str | None, text: str) -> str:
    return f"{title}\n{text}" if title else text


def extract_messages(title: str | None, text: str) -> list[Message]:
    return [
        {"role": "system", "content": EXTRACT_SYSTEM},
        {"role": "user", "content": "Passage:\n" + passage_block(title, text)},
    ]


def glean_messages(first: list[Message], reply: str) -> list[Message]:
    return [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": GLEAN_REQUEST}]


def keyword_messages(query: str) -> list[Message]:
    return [{"role": "system", "content": KEYWORDS_SYSTEM}, {"role": "user", "content": "Question: " + query}]


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _keywords(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(dict.fromkeys(s.strip() for s in items if isinstance(s, str) and s.strip()))


def _strength(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 1.0
    return min(max(number, 0.0), 10.0) if number == number else 1.0


def _entity(item: Any, types: tuple[str, ...]) -> RawEntity | None:
    if not isinstance(item, dict) or not _text(item.get("name")):
        return None
    kind = _text(item.get("type")).lower()
    return RawEntity(_text(item["name"]), kind if kind in types else "other", _text(item.get("description")))


def _relation(item: Any) -> RawRelation | None:
    if not isinstance(item, dict):
        return None
    source, target = _text(item.get("source")), _text(item.get("target"))
    if not source or not target:
        return None
    keywords, description = _keywords(item.get("keywords")), _text(item.get("description"))
    return RawRelation(source, target, keywords, description, _strength(item.get("strength", 1.0)))


def read_graph(obj: dict[str, Any], types: tuple[str, ...] = TYPES) -> ChunkGraph:
    """The entities and relations of an extraction reply; items without a name (or both ends) are dropped, a
    type not among `types` becomes "other". A reply without an `entities` list is unusable (`ExtractionError`,
    which asks once more)."""
    entities, relations = obj.get("entities"), obj.get("relations", [])
    if not isinstance(entities, list) or not isinstance(relations, list):
        raise ExtractionError('the reply needs an "entities" list and a "relations" list')
    found = [e for e in (_entity(item, types) for item in entities) if e is not None]
    linked = [r for r in map(_relation, relations) if r is not None]
    return ChunkGraph(tuple(found), tuple(linked))


def read_keywords(obj: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(high-level, low-level) keywords of a keyword reply."""
    high, low = obj.get("high_level_keywords"), obj.get("low_level_keywords")
    if not isinstance(high, list | str) or not isinstance(low, list | str):
        raise ExtractionError('the reply needs "high_level_keywords" and "low_level_keywords" lists')
    return _keywords(high), _keywords(low)
