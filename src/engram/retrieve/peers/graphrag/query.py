"""GraphRAG local search over the stored index, without an LLM call: the query is embedded, the entities whose
`name: description` embeddings are closest (cosine) are selected, and the context is built from them
(`graphrag.context`). The result's passages are the context's text units in context order; its `facts` are the
context's relationships, its `seeds` the selected entities that made it into the context."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram.retrieve.context import RetrievalContext
from engram.retrieve.peers.base import alive_passages
from engram.retrieve.peers.graphrag.context import Budget, CommunityReport, Context, Picked, Rel, build_context
from engram.retrieve.peers.graphrag.leiden import Community, leaves_by_node
from engram.retrieve.peers.graphrag.prompts import Report
from engram.retrieve.peers.lightrag.query import as_passages
from engram.store.peer_tables import PeerTables
from engram.tokens import default_counter
from engram.types import Fact, Retrieval, Seed


@dataclass(frozen=True)
class Loaded:
    entities: list[Picked]  # score 0; by key
    vectors: npt.NDArray[np.float32]  # unit rows, one per entity
    links: dict[str, list[Rel]]  # each entity's relationships
    names: dict[str, str]
    community_of: dict[str, int]
    reports: dict[int, CommunityReport]


def _unit(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.where(norms == 0, 1.0, norms), dtype=np.float32)


def load(tables: PeerTables, dim: int, community_level: int) -> Loaded:
    rows = tables.read("SELECT key, name, description, degree, sources, vector FROM graphrag_entities ORDER BY key")
    entities = [Picked(str(k), str(n), str(d), int(g), tuple(json.loads(s)), 0.0) for k, n, d, g, s, _ in rows]
    blobs = [bytes(r[5]) for r in rows]
    vectors = (_unit(np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)) if blobs
               else np.zeros((0, dim), dtype=np.float32))  # fmt: skip
    links: dict[str, list[Rel]] = {}
    sql = "SELECT source, target, description, strength, sources FROM graphrag_relationships ORDER BY source, target"
    for s, t, d, w, src in tables.read(sql):
        rel = Rel(str(s), str(t), str(d), float(w), tuple(json.loads(src)))
        links.setdefault(rel.source, []).append(rel)
        links.setdefault(rel.target, []).append(rel)
    reports: dict[int, CommunityReport] = {}
    reported: list[Community] = []
    sql = "SELECT id, level, parent, members, report FROM graphrag_communities WHERE status = 'done' ORDER BY id"
    for cid, level, parent, members, text in tables.read(sql):
        report = Report.of_json(str(text))
        reports[int(cid)] = CommunityReport(int(cid), report.rating, report.text())
        reported.append(Community(int(level), int(cid), int(parent), tuple(json.loads(members))))
    community_of = {k: c.id for k, c in leaves_by_node(reported, community_level).items()}
    return Loaded(entities, vectors, links, {e.key: e.name for e in entities}, community_of, reports)


def cached(tables: PeerTables, dim: int, community_level: int) -> Loaded:
    """`load`, kept on `tables` until the next build (another process's too: the build mark is read each call)."""
    rows = tables.read("SELECT value FROM graphrag_state WHERE key = 'built'")
    mark = f"{rows[0][0] if rows else ''}:{community_level}"
    held = tables.derived.get("graphrag")
    if held is not None and held[0] == mark:
        found: Loaded = held[1]
        return found
    loaded = load(tables, dim, community_level)
    tables.derived["graphrag"] = (mark, loaded)
    return loaded


def select(loaded: Loaded, query: npt.NDArray[np.float32], top_k: int) -> list[Picked]:
    """The `top_k` entities by cosine, best first (ties: by key)."""
    if not loaded.entities or top_k < 1:
        return []
    scores = loaded.vectors @ query
    rows = np.argsort(-scores, kind="stable")[:top_k]
    return [Picked(*_fields(loaded.entities[int(r)]), float(scores[r])) for r in rows]


def _fields(p: Picked) -> tuple[str, str, str, int, tuple[str, ...]]:
    return p.key, p.name, p.description, p.degree, p.sources


def as_retrieval(
    ctx: RetrievalContext, query: str, picked: Sequence[Picked], context: Context, names: dict[str, str], k: int
) -> Retrieval:
    """Passages: the context's text units in context order (each scored by the cosine of the first selected
    entity that came from it), cut to `k`."""
    score = {p.key: p.score for p in picked}
    unit_score: dict[str, float] = {}
    for p in picked:
        for unit in p.sources:
            unit_score.setdefault(unit, p.score)
    ranked = [(u, unit_score.get(u, 0.0)) for u in context.units]
    facts = [
        Fact(names.get(r.source, r.source), r.description, names.get(r.target, r.target),
             max(score.get(r.source, 0.0), score.get(r.target, 0.0)))
        for r in context.relationships
    ]  # fmt: skip
    seeds = [Seed(names[key], score[key]) for key in context.entities]
    return Retrieval(query, as_passages(ctx.view, ranked, k), "graphrag-local", facts=facts,
                     candidate_facts=facts, seeds=seeds)  # fmt: skip


def retrieve(
    ctx: RetrievalContext, tables: PeerTables, queries: list[str], k: int, top_k_entities: int, budget: Budget,
    community_level: int,
) -> list[Retrieval]:  # fmt: skip
    loaded = cached(tables, ctx.dim, community_level)
    vectors = _unit(np.asarray(ctx.embed(list(queries), "query"), dtype=np.float32))
    units = {h: f"{p.title}\n{p.text}" if p.title else p.text for h, p in alive_passages(ctx.view).items()}
    count = default_counter()
    out = []
    for i, query in enumerate(queries):
        picked = select(loaded, vectors[i], top_k_entities)
        reports = (loaded.community_of, loaded.reports)
        context = build_context(picked, loaded.links, loaded.names, reports, units, count, budget)
        out.append(as_retrieval(ctx, query, picked, context, loaded.names, k))
    return out
