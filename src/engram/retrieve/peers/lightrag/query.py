"""LightRAG's query side: the LLM turns each query into high- and low-level keywords; the low-level ones
search the entities by description embedding (local), the high-level ones the relations (global); each side
ranks the chunks its hits came from, and hybrid interleaves the two rankings. Results are passages."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engram.errors import ExtractionError
from engram.index.view.graph_index import GraphIndex
from engram.llm import aio
from engram.llm.base import ChatModel
from engram.llm.json_reply import JsonRequest, aask_json
from engram.retrieve.context import RetrievalContext
from engram.retrieve.peers.base import passages_of
from engram.retrieve.peers.lightrag.prompts import keyword_messages, read_keywords
from engram.store.peer_tables import PeerTables
from engram.types import Fact, Retrieval, RetrievedPassage

KEYWORDS = JsonRequest(what="LightRAG query keywords")
Hit = tuple[float, Sequence[str]]  # a similarity and the chunks (content hashes) the hit came from


@dataclass(frozen=True)
class Table:
    """Unit-length description vectors (rows x dim), each row's source chunks and a label."""

    vectors: npt.NDArray[np.float32]
    sources: list[list[str]]
    labels: list[tuple[str, str, str]]


def rank_chunks(hits: Sequence[Hit]) -> list[tuple[str, float]]:
    """Chunks of the hits, best first: a chunk scores its best hit's similarity; ties go to the chunk more hits
    cite, then to the one met first (LightRAG orders text units by their entity's rank, then by how many
    of the retrieved items they support)."""
    best: dict[str, float] = {}
    cited: dict[str, int] = {}
    for score, sources in hits:
        for chunk in sources:
            best[chunk] = max(best.get(chunk, score), score)
            cited[chunk] = cited.get(chunk, 0) + 1
    order = {chunk: i for i, chunk in enumerate(best)}
    ranked = sorted(best, key=lambda c: (-best[c], -cited[c], order[c]))
    return [(c, best[c]) for c in ranked]


def round_robin(rankings: Sequence[Sequence[tuple[str, float]]]) -> list[tuple[str, float]]:
    """One ranking from several: first of each, then second of each, ... skipping chunks already taken
    (LightRAG's hybrid merge of the local and global chunk lists)."""
    out: list[tuple[str, float]] = []
    seen: set[str] = set()
    for i in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if i < len(ranking) and ranking[i][0] not in seen:
                seen.add(ranking[i][0])
                out.append(ranking[i])
    return out


def top_hits(table: Table, query: npt.NDArray[np.float32], n: int) -> list[tuple[int, float]]:
    if not len(table.sources) or n < 1:
        return []
    scores = table.vectors @ query
    rows = np.argsort(-scores, kind="stable")[:n]
    return [(int(r), float(scores[r])) for r in rows]


def _unit(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.where(norms == 0, 1.0, norms), dtype=np.float32)


def cached_tables(tables: PeerTables, dim: int) -> tuple[Table, Table]:
    """`load_tables`, kept on `tables` until the next merge changes them (another process's merge too: the
    merge digest is read on every call)."""
    rows = tables.read("SELECT value FROM lightrag_state WHERE key = 'merged'")
    digest = str(rows[0][0]) if rows else ""
    held = tables.derived.get("lightrag")
    if held is not None and held[0] == digest:
        found: tuple[Table, Table] = held[1]
        return found
    loaded = load_tables(tables, dim)
    tables.derived["lightrag"] = (digest, loaded)
    return loaded


def load_tables(tables: PeerTables, dim: int) -> tuple[Table, Table]:
    ents = tables.read("SELECT name, type, sources, vector FROM lightrag_entities ORDER BY key")
    rels = tables.read(
        "SELECT e1.name, r.keywords, e2.name, r.sources, r.vector FROM lightrag_relations r "
        "JOIN lightrag_entities e1 ON e1.key = r.source JOIN lightrag_entities e2 ON e2.key = r.target "
        "ORDER BY r.source, r.target"
    )

    def matrix(blobs: list[bytes]) -> npt.NDArray[np.float32]:
        if not blobs:
            return np.zeros((0, dim), dtype=np.float32)
        return _unit(np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1))

    entities = Table(
        matrix([bytes(r[3]) for r in ents]), [json.loads(r[2]) for r in ents], [(r[0], r[1], "") for r in ents]
    )
    relations = Table(
        matrix([bytes(r[4]) for r in rels]),
        [json.loads(r[3]) for r in rels],
        [(str(r[0]), ", ".join(json.loads(r[1])), str(r[2])) for r in rels],
    )
    return entities, relations


async def _keywords_all(chat: ChatModel, queries: Sequence[str]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    async def one(q: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        try:
            return await aask_json(chat, keyword_messages(q), read_keywords, KEYWORDS)
        except ExtractionError:
            return (), ()  # the query text itself stands in for both lists

    return list(await asyncio.gather(*(one(q) for q in queries)))


def query_keywords(chat: ChatModel, queries: Sequence[str]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(high-level, low-level) keywords per query, asked concurrently."""
    return aio.run(_keywords_all(chat, queries))


def as_passages(view: GraphIndex, ranked: Sequence[tuple[str, float]], k: int) -> list[RetrievedPassage]:
    rows = passages_of(view)
    out: list[RetrievedPassage] = []
    for chunk, score in ranked:
        for row in rows.get(chunk, []):
            p = view.passages[row]
            out.append(RetrievedPassage(p.id, p.doc_id, p.title, p.text, score, dict(p.metadata)))
    return out[:k]


def retrieve(
    ctx: RetrievalContext,
    tables: PeerTables,
    queries: list[str],
    k: int,
    top_entities: int,
    top_relations: int,
    mode: str = "hybrid",
) -> list[Retrieval]:
    """`mode` "local" ranks the chunks of the entity hits, "global" those of the relation hits, "hybrid" both
    round-robin; the LLM is asked for both keyword lists in every mode (as LightRAG does)."""
    assert ctx.chat is not None  # checked by engram.retrieve.peers.retrieve
    keywords = query_keywords(ctx.chat, queries)
    low = [", ".join(lo) or q for q, (_, lo) in zip(queries, keywords)]
    high = [", ".join(hi) or q for q, (hi, _) in zip(queries, keywords)]
    vectors = _unit(np.asarray(ctx.embed([*low, *high], "query"), dtype=np.float32))
    entities, relations = cached_tables(tables, ctx.dim)
    out = []
    for i, q in enumerate(queries):
        ent_hits = top_hits(entities, vectors[i], top_entities)
        rel_hits = top_hits(relations, vectors[len(queries) + i], top_relations)
        local = rank_chunks([(s, entities.sources[r]) for r, s in ent_hits])
        overall = rank_chunks([(s, relations.sources[r]) for r, s in rel_hits])
        facts = [Fact(*relations.labels[r], score=s) for r, s in rel_hits[:5]]
        sides = {"local": [local], "global": [overall]}.get(mode, [local, overall])
        passages = as_passages(ctx.view, round_robin(sides), k)
        name = "lightrag" if mode == "hybrid" else f"lightrag-{mode}"
        out.append(Retrieval(q, passages, name, facts=facts, candidate_facts=facts))
    return out
