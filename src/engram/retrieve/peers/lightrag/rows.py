"""How LightRAG's tables store their rows: merged entities and relations with the
SHA-256 of their embedded text and its float32 vector (shared by the full merge and the incremental update)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from engram.retrieve.peers.base import PeerHost
from engram.retrieve.peers.chunk_merge import Entity, Relation


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


def digest_of(hashes: list[str]) -> str:
    """The merge digest: SHA-256 of the sorted content hashes a merge was made from."""
    return hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()
