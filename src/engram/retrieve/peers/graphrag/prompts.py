"""GraphRAG's three indexing requests, in engram's own words (Edge et al., 2024, "From Local to Global: A Graph
RAG Approach to Query-Focused Summarization", and the GraphRAG project's documentation): per text unit, entities
and relationships with descriptions and strengths (with a gleaning request for what was missed); per entity or
relationship met with several descriptions, one merged description; per community, a report (title, summary,
rating, findings). Every reply is a JSON object read leniently (`engram.llm.json_reply`: one repair request)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engram.errors import ExtractionError
from engram.llm.base import Message
from engram.retrieve.peers.chunk_merge import ChunkGraph
from engram.retrieve.peers.lightrag.prompts import passage_block, read_graph

PROMPT_VERSION = "graphrag/1"
TYPES = ("organization", "person", "geo", "event")  # GraphRAG's default entity_types

EXTRACT_SYSTEM = """You build a knowledge graph from one text.
First find every entity of these types: organization, person, geo (places), event. For each give its name
(as the text writes it), its type, and a full description of its attributes and activities from the text.
Then find every pair of those entities that the text clearly relates. For each give the source and target
(names from your entity list), a description of how and why they are related, and a strength from 1 (weak)
to 10 (strong and explicit).
Reply with one JSON object:
{"entities": [{"name": "...", "type": "...", "description": "..."}],
 "relationships": [{"source": "...", "target": "...", "description": "...", "strength": 8}]}
Use only what the text says. Reply with the JSON object only."""

GLEAN_REQUEST = (
    "Many entities and relationships were probably missed in your last reply. Reply with a JSON object of the "
    "same shape that lists only the entities and relationships you missed (empty lists if there are none)."
)

SUMMARY_SYSTEM = """You are given several descriptions of the same entity or of the same relationship, taken
from different texts. Write one comprehensive description that keeps every fact they give, resolves any
contradiction into one coherent statement, is written in the third person and names the entity (or both
entities of the relationship) so it can be read alone. Keep it under 150 words.
Reply with one JSON object: {"description": "..."}"""

REPORT_SYSTEM = """You write a report on one community of a knowledge graph: a group of entities and the
relationships among them, given as tables. The report helps a decision maker understand what the community
is about and why it matters. Reply with one JSON object:
{"title": "a short, specific name for the community naming its key entities",
 "summary": "an executive summary of the community's structure and how its entities relate",
 "rating": 5.0,
 "rating_explanation": "one sentence on the rating",
 "findings": [{"summary": "a one-line insight", "explanation": "a paragraph grounded in the tables"}]}
rating: from 0 to 10, how important or impactful the community is. Give between two and five findings.
Use only what the tables say. Reply with the JSON object only."""


def extract_messages(title: str | None, text: str) -> list[Message]:
    return [
        {"role": "system", "content": EXTRACT_SYSTEM},
        {"role": "user", "content": "Text:\n" + passage_block(title, text)},
    ]


def glean_messages(first: list[Message], reply: str) -> list[Message]:
    return [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": GLEAN_REQUEST}]


def read_extraction(obj: dict[str, Any]) -> ChunkGraph:
    """The entities and relationships of an extraction reply (`relationships`; `relations` is read too)."""
    links = obj.get("relationships", obj.get("relations", []))
    return read_graph({"entities": obj.get("entities"), "relations": links}, TYPES)


def summary_messages(subject: str, descriptions: tuple[str, ...]) -> list[Message]:
    """The request merging the distinct `descriptions` of `subject` (an entity name, or "source -> target")."""
    listed = "\n".join(f"- {d}" for d in descriptions)
    return [
        {"role": "system", "content": SUMMARY_SYSTEM},
        {"role": "user", "content": f"Subject: {subject}\nDescriptions:\n{listed}"},
    ]


def read_summary(obj: dict[str, Any]) -> str:
    text = obj.get("description")
    if not isinstance(text, str) or not text.strip():
        raise ExtractionError('the reply needs a non-empty "description" string')
    return text.strip()


def report_messages(entities: list[str], relationships: list[str]) -> list[Message]:
    """The report request for a community's entity rows and relationship rows (already cut to the budget)."""
    table = "Entities\nid|name|description|degree\n" + "\n".join(entities)
    if relationships:
        table += "\n\nRelationships\nid|source|target|description|degree\n" + "\n".join(relationships)
    return [{"role": "system", "content": REPORT_SYSTEM}, {"role": "user", "content": table}]


@dataclass(frozen=True)
class Report:
    title: str
    summary: str
    rating: float
    rating_explanation: str
    findings: tuple[tuple[str, str], ...]

    def as_json(self) -> str:
        return json.dumps(
            {"title": self.title, "summary": self.summary, "rating": self.rating,
             "rating_explanation": self.rating_explanation, "findings": [list(f) for f in self.findings]},
            ensure_ascii=False,
        )  # fmt: skip

    @staticmethod
    def of_json(text: str) -> Report:
        obj = json.loads(text)
        findings = tuple((str(s), str(e)) for s, e in obj["findings"])
        return Report(str(obj["title"]), str(obj["summary"]), float(obj["rating"]), str(obj["rating_explanation"]),
                      findings)  # fmt: skip

    def text(self) -> str:
        """The report as local search puts it into the context (GraphRAG's full report content)."""
        parts = [f"# {self.title}", self.summary, *(f"## {s}\n{e}" if e else f"## {s}" for s, e in self.findings)]
        return "\n\n".join(p for p in parts if p)


def _str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _rating(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return min(max(number, 0.0), 10.0) if number == number else 0.0


def read_report(obj: dict[str, Any]) -> Report:
    """A report reply; one without a title and a summary is unusable. Findings may be objects or strings."""
    title, summary = _str(obj.get("title")), _str(obj.get("summary"))
    if not title or not summary:
        raise ExtractionError('the reply needs "title" and "summary" strings')
    findings: list[tuple[str, str]] = []
    raw = obj.get("findings")
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and _str(item.get("summary")):
            findings.append((_str(item["summary"]), _str(item.get("explanation"))))
        elif _str(item):
            findings.append((_str(item), ""))
    return Report(title, summary, _rating(obj.get("rating")), _str(obj.get("rating_explanation")), tuple(findings))
