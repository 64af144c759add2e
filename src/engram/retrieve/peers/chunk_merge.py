"""LightRAG's merge step as a pure function: the per-chunk entities and relations of every alive chunk become
one entity per name and one relation per pair of names, each remembering the chunks it came from.

Rules (LightRAG's, except that descriptions are joined, never summarised by the LLM):
- entities merge by normalised name (`engram.text.normalize_phrase`); the name shown is the first spelling
  met; the type is the most frequent one (ties: the first met); descriptions are the distinct ones, joined
  with newlines in the order met;
- relations are undirected: (a, b) and (b, a) merge (the direction shown is the first one met); a relation
  of a name with itself is dropped; keywords are the distinct ones (case-insensitively) in the order
  met; strengths add up; descriptions join as above;
- a name that only a relation mentions becomes an entity of type "unknown" with an empty description;
- chunks are visited in sorted order of their keys, so the result does not depend on the order of the input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from engram.text import normalize_phrase


@dataclass(frozen=True)
class RawEntity:
    name: str
    type: str
    description: str


@dataclass(frozen=True)
class RawRelation:
    source: str
    target: str
    keywords: tuple[str, ...]
    description: str
    strength: float


@dataclass(frozen=True)
class ChunkGraph:
    entities: tuple[RawEntity, ...] = ()
    relations: tuple[RawRelation, ...] = ()


@dataclass(frozen=True)
class Entity:
    key: str
    name: str
    type: str
    description: str
    sources: tuple[str, ...]
    descriptions: tuple[str, ...] = ()  # the distinct descriptions `description` joins, in the order met

    def text(self) -> str:
        """What is embedded for the entity (searched by low-level keywords)."""
        return f"{self.name}\n{self.description}" if self.description else self.name


@dataclass(frozen=True)
class Relation:
    source: str  # entity keys, in the direction first met
    target: str
    keywords: tuple[str, ...]
    description: str
    strength: float
    sources: tuple[str, ...]
    descriptions: tuple[str, ...] = ()  # the distinct descriptions `description` joins, in the order met

    def text(self, names: Mapping[str, str]) -> str:
        """What is embedded for the relation (searched by high-level keywords)."""
        ends = f"{names.get(self.source, self.source)} - {names.get(self.target, self.target)}"
        head = ", ".join(self.keywords)
        return f"{head}: {ends}\n{self.description}" if head else f"{ends}\n{self.description}"


@dataclass
class _Acc:
    name: str
    ends: tuple[str, str] = ("", "")
    types: Counter[str] = field(default_factory=Counter)
    descriptions: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    strength: float = 0.0
    sources: set[str] = field(default_factory=set)

    def describe(self, text: str) -> None:
        if text and text not in self.descriptions:
            self.descriptions.append(text)

    def add_keywords(self, words: tuple[str, ...]) -> None:
        known = {w.casefold() for w in self.keywords}
        for w in words:
            if w.casefold() not in known:
                known.add(w.casefold())
                self.keywords.append(w)


def _entity_of(key: str, acc: _Acc) -> Entity:
    kind = max(acc.types, key=lambda t: acc.types[t]) if acc.types else "unknown"  # first met wins a tie
    described = tuple(acc.descriptions)
    return Entity(key, acc.name, kind, "\n".join(described), tuple(sorted(acc.sources)), described)


def _relation_of(acc: _Acc) -> Relation:
    described = tuple(acc.descriptions)
    keywords, sources = tuple(acc.keywords), tuple(sorted(acc.sources))
    return Relation(*acc.ends, keywords, "\n".join(described), acc.strength, sources, described)


def merge(chunks: Mapping[str, ChunkGraph]) -> tuple[list[Entity], list[Relation]]:
    """Entities sorted by key and relations sorted by their pair of keys, from the chunks' graphs keyed by
    chunk id (the passage content hash)."""
    entities: dict[str, _Acc] = {}
    relations: dict[tuple[str, str], _Acc] = {}
    for chunk in sorted(chunks):
        graph = chunks[chunk]
        for e in graph.entities:
            key = normalize_phrase(e.name)
            if key:
                acc = entities.setdefault(key, _Acc(e.name))
                acc.types[e.type] += 1
                acc.describe(e.description)
                acc.sources.add(chunk)
        for r in graph.relations:
            a, b = normalize_phrase(r.source), normalize_phrase(r.target)
            if not a or not b or a == b:
                continue
            for key, name in ((a, r.source), (b, r.target)):
                entities.setdefault(key, _Acc(name)).sources.add(chunk)
            rel = relations.setdefault((min(a, b), max(a, b)), _Acc("", (a, b)))
            rel.add_keywords(r.keywords)
            rel.describe(r.description)
            rel.strength += r.strength
            rel.sources.add(chunk)
    merged = [_entity_of(key, entities[key]) for key in sorted(entities)]
    links = [_relation_of(acc) for _, acc in sorted(relations.items())]
    return merged, links
