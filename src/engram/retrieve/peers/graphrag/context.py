"""GraphRAG local search's context, as pure functions over hand-made or stored inputs (after the GraphRAG
project's mixed local context): the selected entities (best first) bring, within a total token budget split in
shares, the reports of their communities, themselves and their relationships, and the text units they came from.

- Shares (GraphRAG's defaults): `max_tokens` 12,000; community reports `community_prop` 0.1; text units
  `text_unit_prop` 0.5; entities and relationships the rest (0.4).
- Community reports: of the selected entities' communities, ranked by how many selected entities each holds,
  then by rating, then by id; added in that order while they fit.
- Entities and relationships: entities are added one at a time in selection order; after each, the
  relationships of the entities so far are chosen again (GraphRAG's filter: relationships among selected
  entities by strength, then relationships to outside entities ranked by how many selected entities link to
  that outside entity, then by strength, at most `top_k_relationships` per selected entity); the first entity
  whose tables no longer fit ends the section (the tables before it are kept).
- Text units: the units of each selected entity in selection order; units of one entity ranked by how many of
  that entity's relationships the unit supports (cites), most first; a unit met again keeps its first place;
  added in that order while they fit.
A section stops at the first row that does not fit, as GraphRAG's builders do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engram.tokens import TokenCount


@dataclass(frozen=True)
class Picked:
    """A selected entity: key, shown name, description, degree, the text units it came from, cosine score."""

    key: str
    name: str
    description: str
    degree: int
    sources: tuple[str, ...]
    score: float


@dataclass(frozen=True)
class Rel:
    source: str
    target: str
    description: str
    strength: float
    sources: tuple[str, ...]

    def ends(self) -> tuple[str, str]:
        return (self.source, self.target)


@dataclass(frozen=True)
class CommunityReport:
    id: int
    rating: float
    text: str


@dataclass(frozen=True)
class Budget:
    max_tokens: int = 12_000
    text_unit_prop: float = 0.5
    community_prop: float = 0.1
    top_k_relationships: int = 10

    def shares(self) -> tuple[int, int, int]:
        """Tokens for (community reports, entities and relationships, text units)."""
        local = 1.0 - self.community_prop - self.text_unit_prop
        return (max(int(self.max_tokens * self.community_prop), 0), max(int(self.max_tokens * local), 0),
                max(int(self.max_tokens * self.text_unit_prop), 0))  # fmt: skip


@dataclass
class Context:
    reports: list[int] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    relationships: list[Rel] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)


def _clean(text: str) -> str:
    return " ".join(text.split()).replace("|", "/")


def fit(header: str, rows: Sequence[str], count: TokenCount, budget: int) -> tuple[int, int]:
    """How many of `rows` (in order) fit under `header` in `budget` tokens, and the tokens they take."""
    used = count(header)
    if used > budget:
        return 0, 0
    for n, row in enumerate(rows):
        size = count(row) + 1
        if used + size > budget:
            return n, used
        used += size
    return len(rows), used


def rank_communities(
    picked: Sequence[Picked], community_of: Mapping[str, int], ratings: Mapping[int, float]
) -> list[int]:
    """The selected entities' communities (with a report) by number of selected members, rating, id."""
    matches: dict[int, int] = {}
    for p in picked:
        c = community_of.get(p.key)
        if c is not None and c in ratings:
            matches[c] = matches.get(c, 0) + 1
    return sorted(matches, key=lambda c: (-matches[c], -ratings[c], c))


def filter_relationships(keys: Sequence[str], links: Mapping[str, Sequence[Rel]], top_k: int) -> list[Rel]:
    chosen = set(keys)
    seen: dict[tuple[str, str], Rel] = {}
    for key in keys:
        for r in links.get(key, ()):
            seen.setdefault(r.ends(), r)
    inside = sorted((r for r in seen.values() if set(r.ends()) <= chosen), key=lambda r: (-r.strength, r.ends()))
    outside = [r for r in seen.values() if not set(r.ends()) <= chosen]
    linked: dict[str, int] = {}
    for r in outside:
        other = r.target if r.source in chosen else r.source
        linked[other] = linked.get(other, 0) + 1

    def outer(r: Rel) -> int:
        return linked[r.target if r.source in chosen else r.source]

    outside.sort(key=lambda r: (-outer(r), -r.strength, r.ends()))
    return inside + outside[: top_k * len(keys)]


def _entity_rows(picked: Sequence[Picked]) -> list[str]:
    return [f"{i}|{_clean(p.name)}|{_clean(p.description)}|{p.degree}" for i, p in enumerate(picked)]


def _relationship_rows(rels: Sequence[Rel], names: Mapping[str, str]) -> list[str]:
    return [
        f"{i}|{_clean(names.get(r.source, r.source))}|{_clean(names.get(r.target, r.target))}|"
        f"{_clean(r.description)}|{r.strength:g}"
        for i, r in enumerate(rels)
    ]


ENTITY_HEADER = "-----Entities-----\nid|entity|description|number of relationships"
RELATIONSHIP_HEADER = "-----Relationships-----\nid|source|target|description|weight"
REPORT_HEADER = "-----Reports-----\nid|content"
UNIT_HEADER = "-----Sources-----\nid|text"


def local_context(
    picked: Sequence[Picked], links: Mapping[str, Sequence[Rel]], names: Mapping[str, str], count: TokenCount,
    budget: int, top_k: int,
) -> tuple[list[str], list[Rel], int]:  # fmt: skip
    """The entities (keys) and relationships of the local section and the tokens they take."""
    kept: tuple[list[str], list[Rel], int] = ([], [], 0)
    for n in range(1, len(picked) + 1):
        rels = filter_relationships([p.key for p in picked[:n]], links, top_k)
        entity_rows, rel_rows = _entity_rows(picked[:n]), _relationship_rows(rels, names)
        tokens = count(ENTITY_HEADER) + sum(count(r) + 1 for r in entity_rows)
        tokens += count(RELATIONSHIP_HEADER) + sum(count(r) + 1 for r in rel_rows)
        if tokens > budget:
            break
        kept = ([p.key for p in picked[:n]], rels, tokens)
    return kept


def rank_units(picked: Sequence[Picked], links: Mapping[str, Sequence[Rel]]) -> list[str]:
    """Text units in context order: by the rank of the first selected entity that came from them, then by how
    many of that entity's relationships they support."""
    order: list[tuple[int, int, str]] = []
    seen: set[str] = set()
    for i, p in enumerate(picked):
        for unit in p.sources:
            if unit not in seen:
                seen.add(unit)
                order.append((i, -sum(unit in r.sources for r in links.get(p.key, ())), unit))
    return [unit for _, _, unit in sorted(order)]


def build_context(
    picked: Sequence[Picked], links: Mapping[str, Sequence[Rel]], names: Mapping[str, str],
    reports: tuple[Mapping[str, int], Mapping[int, CommunityReport]], units: Mapping[str, str], count: TokenCount,
    budget: Budget = Budget(),
) -> Context:  # fmt: skip
    """The local search context of the `picked` entities. `reports`: (community of each entity key, report of
    each community that has one); `units`: text unit text by content hash."""
    community_share, local_share, unit_share = budget.shares()
    community_of, by_id = reports
    ranked = rank_communities(picked, community_of, {c: r.rating for c, r in by_id.items()})
    rows = [f"{c}|{_clean(by_id[c].text)}" for c in ranked]
    n, report_tokens = fit(REPORT_HEADER, rows, count, community_share)
    keys, rels, local_tokens = local_context(picked, links, names, count, local_share, budget.top_k_relationships)
    order = [u for u in rank_units(picked, links) if u in units]
    m, unit_tokens = fit(UNIT_HEADER, [f"{i}|{_clean(units[u])}" for i, u in enumerate(order)], count, unit_share)
    tokens = {"reports": report_tokens, "local": local_tokens, "units": unit_tokens}
    return Context(ranked[:n], keys, rels, order[:m], tokens)
