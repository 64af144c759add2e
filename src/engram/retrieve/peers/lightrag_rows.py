"""How LightRAG's tables store their rows: a chunk's extraction as JSON, merged entities and relations with the
SHA-256 of their embedded text and its float32 vector (shared by the full merge and the incremental update)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from engram.retrieve.peers.base import PeerHost
from engram.retrieve.peers.lightrag_merge import ChunkGraph, Entity, RawEntity, RawRelation, Relation
from engram.store.peer_tables import PeerTables


def graph_json(graph: ChunkGraph) -> str:
    entities = [[e.name, e.type, e.description] for e in graph.entities]
    relations = [[r.source, r.target, list(r.keywords), r.description, r.strength] for r in graph.relations]
    return json.dumps({"entities": entities, "relations": relations}, ensure_ascii=False)


def graph_of(text: str) -> ChunkGraph:
    obj = json.loads(text)
    entities = tuple(RawEntity(str(n), str(t), str(d)) for n, t, d in obj["entities"])
    relations = tuple(
        RawRelation(str(s), str(t), tuple(str(k) for k in kws), str(d), float(w))
        for s, t, kws, d, w in obj["relations"]
    )
    return ChunkGraph(entities, relations)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def vectors_for(host: PeerHost, texts: list[str], known: dict[str, bytes]) -> dict[str, bytes]:
    """Float32 bytes per text hash: known ones reused, the others embedded (passage role) in one batch."""
    out = {h: v for h, v in known.items()}
    fresh = sorted({text_hash(t): t for t in texts if text_hash(t) not in out}.items())
    if fresh:
        embedded = np.asarray(host.embed([t for _, t in fresh], "passage"), dtype=np.float32)
        for (h, _), row in zip(fresh, embedded):
            out[h] = row.tobytes()
    return out


def entity_row(e: Entity, text: str, vectors: dict[str, bytes]) -> tuple[Any, ...]:
    h = text_hash(text)
    return (e.key, e.name, e.type, e.description, json.dumps(list(e.sources)), h, vectors[h])


def relation_row(r: Relation, text: str, vectors: dict[str, bytes]) -> tuple[Any, ...]:
    h = text_hash(text)
    keywords = json.dumps(list(r.keywords), ensure_ascii=False)
    return (r.source, r.target, keywords, r.description, r.strength, json.dumps(list(r.sources)), h, vectors[h])


def insert_merged(
    db: Any,
    entities: list[tuple[Entity, str]],
    relations: list[tuple[Relation, str]],
    vectors: dict[str, bytes],
    digest: str,
) -> None:
    """Write merged entities and relations (each with its embedded text) and the digest of the merge."""
    db.executemany(
        "INSERT INTO lightrag_entities VALUES (?, ?, ?, ?, ?, ?, ?)", [entity_row(e, t, vectors) for e, t in entities]
    )
    db.executemany(
        "INSERT INTO lightrag_relations VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [relation_row(r, t, vectors) for r, t in relations],
    )
    db.execute("INSERT OR REPLACE INTO lightrag_state (key, value) VALUES ('merged', ?)", (digest,))


def chunk_graphs(tables: PeerTables, hashes: list[str]) -> dict[str, ChunkGraph]:
    """The stored extractions of the `done` chunks among `hashes`."""
    out: dict[str, ChunkGraph] = {}
    for start in range(0, len(hashes), 500):
        part = hashes[start : start + 500]
        marks = ",".join("?" * len(part))
        sql = f"SELECT content_hash, graph FROM lightrag_chunks WHERE status = 'done' AND content_hash IN ({marks})"
        out.update({str(h): graph_of(str(g)) for h, g in tables.read(sql, part)})
    return out


def digest_of(hashes: list[str]) -> str:
    """The merge digest: SHA-256 of the sorted content hashes a merge was made from."""
    return hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()
