"""LightRAG's index over a memory: per-chunk extraction into `lightrag_chunks` (keyed by passage content, so
identical passages are extracted once), then the merged entities and relations with their description
embeddings (`lightrag_entities`, `lightrag_relations`). `sync` brings the tables in step with the memory's alive
passages: new chunks are extracted, chunks no alive passage holds any more are dropped, and the merge is redone
when the set of extracted chunks changed; only entities and relations whose embedded text changed are embedded
again (the others keep their vectors)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

from engram.errors import ExtractionError, LLMError
from engram.llm import aio
from engram.llm.base import ChatModel, concurrency_of
from engram.llm.json_reply import JsonRequest, aask_json
from engram.retrieve.peers.base import PeerHost, PeerSync, alive_passages
from engram.retrieve.peers.lightrag_merge import ChunkGraph, merge
from engram.retrieve.peers.lightrag_prompts import extract_messages, glean_messages, read_graph
from engram.retrieve.peers.lightrag_rows import (
    chunk_graphs,
    digest_of,
    graph_json,
    insert_merged,
    text_hash,
    vectors_for,
)
from engram.retrieve.peers.lightrag_update import update_merged
from engram.store.peer_tables import PeerTables
from engram.store.rows import PassageRow

SCHEMA = """
CREATE TABLE IF NOT EXISTS lightrag_chunks (
    content_hash TEXT PRIMARY KEY, status TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    graph TEXT NOT NULL, error TEXT, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS lightrag_entities (
    key TEXT PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, description TEXT NOT NULL,
    sources TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS lightrag_relations (
    source TEXT NOT NULL, target TEXT NOT NULL, keywords TEXT NOT NULL, description TEXT NOT NULL,
    strength REAL NOT NULL, sources TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (source, target));
CREATE TABLE IF NOT EXISTS lightrag_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
EXTRACTION = JsonRequest(what="LightRAG extraction")


async def extract_chunk(chat: ChatModel, p: PassageRow, gleanings: int) -> ChunkGraph:
    """One chunk's entities and relations: the extraction request, then `gleanings` requests for what the
    replies so far missed (a gleaning reply that cannot be used ends the gleaning; the rest is kept)."""
    messages = extract_messages(p.title, p.text)
    graph, obj = await aask_json(chat, messages, lambda o: (read_graph(o), o), EXTRACTION)
    for _ in range(gleanings):
        messages = glean_messages(messages, json.dumps(obj, ensure_ascii=False, sort_keys=True))
        try:
            more, obj = await aask_json(chat, messages, lambda o: (read_graph(o), o), EXTRACTION)
        except ExtractionError:
            break
        graph = ChunkGraph(graph.entities + more.entities, graph.relations + more.relations)
    return graph


async def _extract_all(host: PeerHost, chat: ChatModel, todo: Sequence[PassageRow], gleanings: int) -> list[Any]:
    gate = asyncio.Semaphore(concurrency_of(chat))
    done = [0]

    async def one(p: PassageRow) -> ChunkGraph | str:
        async with gate:
            try:
                return await extract_chunk(chat, p, gleanings)
            except (ExtractionError, LLMError) as exc:
                return f"{type(exc).__name__}: {exc}"
            finally:
                done[0] += 1
                if host.progress is not None:
                    host.progress("lightrag", done[0], len(todo))

    return list(await asyncio.gather(*(one(p) for p in todo)))


def extract_new(host: PeerHost, todo: Sequence[PassageRow], gleanings: int, report: PeerSync) -> list[str]:
    """Extract `todo` and store each chunk's result; the content hashes of the chunks now done."""
    if host.chat is None:
        raise LLMError("lightrag indexes with an LLM: set ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL (or pass llm=)")
    results = aio.run(_extract_all(host, host.chat, todo, gleanings))
    now = time.time()
    with host.tables.transaction() as db:
        for p, result in zip(todo, results):
            ok = isinstance(result, ChunkGraph)
            db.execute(
                "INSERT OR REPLACE INTO lightrag_chunks (content_hash, status, graph, error, updated) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    p.content_hash,
                    "done" if ok else "failed",
                    graph_json(result) if ok else "{}",
                    None if ok else result,
                    now,
                ),
            )
    report.extracted += sum(isinstance(r, ChunkGraph) for r in results)
    report.failed += sum(not isinstance(r, ChunkGraph) for r in results)
    return [p.content_hash for p, r in zip(todo, results) if isinstance(r, ChunkGraph)]


def sync(host: PeerHost, gleanings: int) -> PeerSync:
    """Extract the alive chunks not done yet, drop the chunks no alive passage holds, then update the merged
    tables for what changed (`lightrag_update`), or merge everything again when the tables were not merged
    from the chunks held before this call (first use, a new version, an interrupted sync)."""
    report = PeerSync("lightrag")
    tables = host.tables
    alive = alive_passages(host.view)
    status = {str(h): str(s) for h, s in tables.read("SELECT content_hash, status FROM lightrag_chunks")}
    before = sorted(h for h, s in status.items() if s == "done")
    todo = [p for h, p in alive.items() if status.get(h) != "done"]
    gone = [h for h in status if h not in alive]
    removed = chunk_graphs(tables, [h for h in gone if status[h] == "done"])
    added: list[str] = []
    if todo and host.chat is not None:  # without an LLM new chunks wait for the next sync that has one
        added = extract_new(host, todo, gleanings, report)
    if gone:
        with tables.transaction() as db:
            db.executemany("DELETE FROM lightrag_chunks WHERE content_hash = ?", [(h,) for h in gone])
        report.removed = len(gone)
    done = sorted((set(before) - set(gone)) | set(added))
    digest = digest_of(done)
    rows = tables.read("SELECT value FROM lightrag_state WHERE key = 'merged'")
    merged = str(rows[0][0]) if rows else None
    if merged == digest_of(before) and merged != digest:
        update_merged(host, chunk_graphs(tables, added), removed, digest, report)
    elif merged != digest:
        remerge(host, done, digest, report)
    report.stats = {**stats(tables), "pending": 0 if host.chat is not None else len(todo)}
    return report


def remerge(host: PeerHost, done: list[str], digest: str, report: PeerSync) -> None:
    tables = host.tables
    entities, relations = merge(chunk_graphs(tables, done))
    names = {e.key: e.name for e in entities}
    entity_texts = [e.text() for e in entities]
    relation_texts = [r.text(names) for r in relations]
    known = {str(h): bytes(v) for h, v in tables.read("SELECT text_hash, vector FROM lightrag_entities")}
    known.update({str(h): bytes(v) for h, v in tables.read("SELECT text_hash, vector FROM lightrag_relations")})
    vectors = vectors_for(host, [*entity_texts, *relation_texts], known)
    report.embedded = len({text_hash(t) for t in [*entity_texts, *relation_texts]} - set(known))
    with tables.transaction() as db:
        db.execute("DELETE FROM lightrag_entities")
        db.execute("DELETE FROM lightrag_relations")
        insert_merged(db, list(zip(entities, entity_texts)), list(zip(relations, relation_texts)), vectors, digest)


def stats(tables: PeerTables) -> dict[str, int]:
    def count(sql: str) -> int:
        return int(tables.read(sql)[0][0])

    return {
        "chunks": count("SELECT COUNT(*) FROM lightrag_chunks WHERE status = 'done'"),
        "failed": count("SELECT COUNT(*) FROM lightrag_chunks WHERE status = 'failed'"),
        "entities": count("SELECT COUNT(*) FROM lightrag_entities"),
        "relations": count("SELECT COUNT(*) FROM lightrag_relations"),
    }
