"""LightRAG's index over a memory: per-chunk extraction into `lightrag_chunks` (`chunk_extract`; keyed by
passage content, so identical passages are extracted once), then the merged entities and relations with their
description embeddings (`lightrag_entities`, `lightrag_relations`). `sync` brings the tables in step with the
memory's alive passages: new chunks are extracted, chunks no alive passage holds any more are dropped, and the
merge is redone when the set of extracted chunks changed; only entities and relations whose embedded text changed
are embedded again (the others keep their vectors)."""

from __future__ import annotations

from engram.llm.json_reply import JsonRequest
from engram.retrieve.peers.base import PeerHost, PeerSync
from engram.retrieve.peers.chunk_extract import Extraction, chunk_graphs, chunks_schema, step_chunks
from engram.retrieve.peers.chunk_merge import merge
from engram.retrieve.peers.lightrag.prompts import extract_messages, glean_messages, read_graph
from engram.retrieve.peers.lightrag.rows import digest_of, insert_merged, text_hash, vectors_for
from engram.retrieve.peers.lightrag.update import update_merged
from engram.store.peer_tables import PeerTables

SCHEMA = (
    chunks_schema("lightrag_chunks")
    + """;
CREATE TABLE IF NOT EXISTS lightrag_entities (
    key TEXT PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, description TEXT NOT NULL,
    sources TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS lightrag_relations (
    source TEXT NOT NULL, target TEXT NOT NULL, keywords TEXT NOT NULL, description TEXT NOT NULL,
    strength REAL NOT NULL, sources TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (source, target));
CREATE TABLE IF NOT EXISTS lightrag_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
)
EXTRACTION = Extraction(
    "lightrag", "lightrag_chunks", extract_messages, glean_messages, read_graph, JsonRequest(what="LightRAG extraction")
)


def sync(host: PeerHost, gleanings: int) -> PeerSync:
    """Extract the alive chunks not done yet, drop the chunks no alive passage holds (`chunk_extract`), then
    update the merged tables for what changed (`lightrag.update`), or merge everything again when the tables
    were not merged from the chunks held before this call (first use, a new version, an interrupted sync)."""
    report = PeerSync("lightrag")
    tables = host.tables
    step = step_chunks(host, EXTRACTION, gleanings, report)
    done = step.done
    digest = digest_of(done)
    rows = tables.read("SELECT value FROM lightrag_state WHERE key = 'merged'")
    merged = str(rows[0][0]) if rows else None
    if merged == digest_of(step.before) and merged != digest:
        update_merged(host, chunk_graphs(tables, step.added), step.removed, digest, report)
    elif merged != digest:
        remerge(host, done, digest, report)
    report.stats = {**stats(tables), "pending": step.pending}
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
