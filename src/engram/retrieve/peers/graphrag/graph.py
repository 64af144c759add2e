"""GraphRAG's entity graph from the merged extractions, as pure functions: which merged entities and
relationships need an LLM summary of their several descriptions (and the request for each), the graph with the
summaries applied (an item without its summary keeps its descriptions joined), entity degrees, and the report
request of a community cut to a token budget.

The merge itself is LightRAG's (`chunk_merge.merge`: one entity per normalised name, one undirected
relationship per pair, strengths summed, distinct descriptions kept in the order met)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engram.llm.base import Message
from engram.retrieve.peers.chunk_merge import Entity, Relation
from engram.retrieve.peers.graphrag.leiden import Community
from engram.retrieve.peers.graphrag.prompts import report_messages, summary_messages
from engram.tokens import TokenCount


@dataclass(frozen=True)
class Node:
    key: str  # normalised name
    name: str
    type: str
    description: str
    sources: tuple[str, ...]  # content hashes of the text units it came from
    degree: int = 0

    def text(self) -> str:
        """What is embedded for the entity: `name: description`."""
        return f"{self.name}: {self.description}" if self.description else self.name


@dataclass(frozen=True)
class Link:
    source: str  # entity keys, the direction first met
    target: str
    description: str
    strength: float
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Graph:
    nodes: list[Node]  # sorted by key
    links: list[Link]  # sorted by pair

    def names(self) -> dict[str, str]:
        return {n.key: n.name for n in self.nodes}


def request_hash(messages: list[Message]) -> str:
    return hashlib.sha256(json.dumps(messages, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()


def _relation_subject(r: Relation, names: Mapping[str, str]) -> str:
    return f"{names.get(r.source, r.source)} -> {names.get(r.target, r.target)}"


def summary_requests(entities: Sequence[Entity], relations: Sequence[Relation]) -> dict[str, list[Message]]:
    """The summary request of every entity and relationship with more than one distinct description, by the
    hash of the request."""
    names = {e.key: e.name for e in entities}
    out: dict[str, list[Message]] = {}
    for subject, descriptions in [
        *((e.name, e.descriptions) for e in entities),
        *((_relation_subject(r, names), r.descriptions) for r in relations),
    ]:
        if len(descriptions) > 1:
            messages = summary_messages(subject, descriptions)
            out[request_hash(messages)] = messages
    return out


def _description(subject: str, descriptions: tuple[str, ...], summaries: Mapping[str, str]) -> str:
    if len(descriptions) <= 1:
        return descriptions[0] if descriptions else ""
    return summaries.get(request_hash(summary_messages(subject, descriptions)), "\n".join(descriptions))


def graph_of(entities: Sequence[Entity], relations: Sequence[Relation], summaries: Mapping[str, str]) -> Graph:
    """The graph with each item's summary (by request hash) where several descriptions were merged; entity
    degree = the number of relationships it takes part in."""
    names = {e.key: e.name for e in entities}
    degree: dict[str, int] = {}
    for r in relations:
        degree[r.source] = degree.get(r.source, 0) + 1
        degree[r.target] = degree.get(r.target, 0) + 1
    nodes = [
        Node(e.key, e.name, e.type, _description(e.name, e.descriptions, summaries), e.sources, degree.get(e.key, 0))
        for e in entities
    ]
    links = [
        Link(
            r.source,
            r.target,
            _description(_relation_subject(r, names), r.descriptions, summaries),
            r.strength,
            r.sources,
        )
        for r in relations
    ]
    return Graph(nodes, links)


def _clean(text: str) -> str:
    return " ".join(text.split()).replace("|", "/")


def links_by_node(graph: Graph) -> dict[str, list[Link]]:
    out: dict[str, list[Link]] = {}
    for lk in graph.links:
        out.setdefault(lk.source, []).append(lk)
        out.setdefault(lk.target, []).append(lk)
    return out


def community_request(
    community: Community, by_key: Mapping[str, Node], links_of: Mapping[str, Sequence[Link]], count: TokenCount,
    budget: int,
) -> list[Message]:  # fmt: skip
    """The report request of `community`: its entities (by degree, highest first) and the relationships among
    them (by the sum of their ends' degrees), rows added while the request stays within `budget` tokens
    (entities first, then relationships, as GraphRAG's report context does). `by_key`: the graph's nodes by
    key; `links_of`: each node's links (`links_by_node`)."""
    members = set(community.members)
    nodes = sorted((by_key[m] for m in community.members if m in by_key), key=lambda n: (-n.degree, n.key))
    inside = {(lk.source, lk.target): lk for m in community.members for lk in links_of.get(m, ())
              if lk.source in members and lk.target in members}  # fmt: skip
    ranked = sorted(inside.values(), key=lambda lk: (-(by_key[lk.source].degree + by_key[lk.target].degree),
                                                     lk.source, lk.target))  # fmt: skip
    used = count(report_messages([], [])[-1]["content"]) + count(str(report_messages([], [])[0]["content"]))
    rows: tuple[list[str], list[str]] = ([], [])
    for i, n in enumerate(nodes):
        rows[0].append(f"{i}|{_clean(n.name)}|{_clean(n.description)}|{n.degree}")
    for i, lk in enumerate(ranked):
        ends = by_key[lk.source], by_key[lk.target]
        rows[1].append(f"{i}|{_clean(ends[0].name)}|{_clean(ends[1].name)}|{_clean(lk.description)}|"
                       f"{ends[0].degree + ends[1].degree}")  # fmt: skip
    kept: tuple[list[str], list[str]] = ([], [])
    for part, row in [(0, r) for r in rows[0]] + [(1, r) for r in rows[1]]:
        size = count(row) + 1
        if used + size > budget:
            break  # the first row that does not fit ends the request (no relationship of a left-out entity)
        used += size
        kept[part].append(row)
    return report_messages(*kept)
