"""Public value types. Results always have one type: `Retrieval` for retrieve, `Answer` for answer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# progress(stage, done, total): opt-in in the library; the CLI turns it into progress bars, the server into job
# progress
Progress = Callable[[str, int, int], None]

Triple = tuple[str, str, str]


@dataclass(frozen=True)
class Document:
    """A document to index. `id` is stable and chosen by the caller (a path, a database key, ...)."""

    id: str
    text: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Passage:
    """A chunk of a document: the unit that is extracted, embedded and retrieved."""

    id: str
    doc_id: str
    index: int
    text: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Extraction:
    """Named entities and open-IE triples of one passage, as extracted (not normalised)."""

    passage_id: str
    entities: list[str]
    triples: list[Triple]


@dataclass(frozen=True)
class RetrievedPassage:
    id: str
    doc_id: str
    title: str | None
    text: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fact:
    """A triple with its similarity to the query."""

    subject: str
    relation: str
    object: str
    score: float

    @property
    def triple(self) -> Triple:
        return (self.subject, self.relation, self.object)


@dataclass(frozen=True)
class Seed:
    """A phrase node used as a Personalized PageRank seed, with its reset weight before normalisation."""

    phrase: str
    weight: float


@dataclass(frozen=True)
class Retrieval:
    """Ranked passages for one query, and why they were ranked so.

    `candidate_facts` are the top facts by similarity, `facts` those the recognition filter kept (all of the
    candidates when no filter ran), `seeds` the phrase seeds of the graph search. `method` says what produced
    the ranking ("hipporag2"; "hybrid" (dense + BM25) or "dense" when the graph had no seed; "bm25", ...).
    `pending` counts passages indexed without an extraction yet (they are found by dense/BM25 only);
    `fallback_reason` says why a graph method fell back to its passage scores; `signals` says in one line
    which signals ranked the passages.
    """

    query: str
    passages: list[RetrievedPassage]
    method: str
    facts: list[Fact] = field(default_factory=list)
    candidate_facts: list[Fact] = field(default_factory=list)
    seeds: list[Seed] = field(default_factory=list)
    filtered: bool = False
    pending: int = 0
    # why a graph method ranked by its passage scores alone ("" when it did not fall back)
    fallback_reason: str = ""
    # one line on which signals ranked the passages (PageRank seeds, dense cosine, BM25)
    signals: str = ""

    @property
    def fell_back(self) -> bool:
        """A graph method ranked by its passage scores alone (`fallback_reason` says why); REST, MCP and
        `engram retrieve --json` report this same value."""
        return bool(self.fallback_reason)


@dataclass(frozen=True)
class Answer:
    query: str
    answer: str
    passages: list[RetrievedPassage]
    facts: list[Fact]
    raw: str = ""


@dataclass
class IndexReport:
    """What an index, update, delete or extract call did, and the memory's stats after it."""

    documents: int = 0
    passages: int = 0
    unchanged: int = 0
    imported: int = 0
    extracted: int = 0
    failed: int = 0
    pending: int = 0  # passages of the whole memory still pending after this call (as stats["pending"])
    skipped: dict[str, str] = field(default_factory=dict)
    dropped_triples: int = 0  # malformed triples in the extractions of the memory's alive passages (not this call's)
    stats: dict[str, int] = field(default_factory=dict)
    # seconds per step: prepare, import, extract, embed, tables, synonyms, graph, commit
    timings: dict[str, float] = field(default_factory=dict)
    # the token budget (max_tokens) stopped extraction: unfinished passages stay pending, a re-run resumes
    budget_reached: bool = False
    # LLM usage of this call: calls, prompt_tokens, completion_tokens, cache_hits, retries, failures, tokens
    llm: dict[str, int] = field(default_factory=dict)
    # ids of the documents this call added and of those whose content it replaced (index, update)
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    # ids of the documents this call deleted (delete; unknown ids are in `skipped`)
    deleted: list[str] = field(default_factory=list)


NodePair = tuple[str, str]


@dataclass(frozen=True)
class GraphSnapshot:
    """A memory's graph at one generation, by names (`Memory.graph`): a frozen copy, for inspecting and comparing
    memories. Nodes are named "p:<phrase>" (normalised) and "d:<passage id>"; an edge is keyed by its two node
    names, sorted. Only alive nodes (those a stored passage supports) appear, and only edges between them.
    Weights are rounded to 9 decimals, so memories built in another order compare equal (`==`).

    Attributes
    ----------
    passages
        Alive passage ids, sorted (pending ones too: nodes without edges).
    phrases
        Alive phrases, normalised and sorted.
    facts
        Alive (subject, relation, object) facts, normalised and sorted.
    relation_edges
        Phrase pairs linked by facts, weighted by how many passages state them.
    synonym_edges
        Phrase pairs whose embeddings are similar enough, weighted by their cosine.
    context_edges
        (phrase, passage) pairs: a passage mentions the phrase (the configured context weight).
    edges
        Every linked pair with its summed weight: what retrieval's random walk sees (a relation and a synonym
        edge on one pair add up).
    counts
        `Memory.stats()`'s graph counts: passages, phrases, facts, edges of each kind, pending, failed.
    """

    passages: tuple[str, ...]
    phrases: tuple[str, ...]
    facts: tuple[Triple, ...]
    relation_edges: Mapping[NodePair, float]
    synonym_edges: Mapping[NodePair, float]
    context_edges: Mapping[NodePair, float]
    edges: Mapping[NodePair, float]
    counts: Mapping[str, int]
