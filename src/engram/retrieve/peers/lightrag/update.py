"""LightRAG's merged tables updated for the chunks one write added and removed, instead of merged again from
every chunk. An entity or relation depends only on the chunks that mention it, so re-merging the chunks that
mention a touched name or pair (found through the stored `sources`) gives exactly what a full merge would give
for those rows; relations whose end changed its shown name get their text (and vector) renewed. Everything else
keeps its row. Tested against the full merge (`lightrag.index.remerge`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engram.retrieve.peers.base import PeerHost, PeerSync
from engram.retrieve.peers.chunk_extract import chunk_graphs
from engram.retrieve.peers.chunk_merge import ChunkGraph, Entity, Relation, merge
from engram.retrieve.peers.lightrag.rows import insert_merged, text_hash, vectors_for
from engram.store.peer_tables import PeerTables
from engram.text import normalize_phrase

Pair = tuple[str, str]


@dataclass(frozen=True)
class _Old:
    name: str
    sources: list[str]
    hash: str
    vector: bytes


def touched(graphs: list[ChunkGraph]) -> tuple[set[str], set[Pair]]:
    """The entity keys and unordered relation pairs the graphs mention (as `merge` keys them)."""
    keys: set[str] = set()
    pairs: set[Pair] = set()
    for graph in graphs:
        keys |= {k for k in (normalize_phrase(e.name) for e in graph.entities) if k}
        for r in graph.relations:
            a, b = normalize_phrase(r.source), normalize_phrase(r.target)
            if a and b and a != b:
                keys |= {a, b}
                pairs.add((min(a, b), max(a, b)))
    return keys, pairs


def _in(column: str, values: list[str]) -> str:
    return f"{column} IN ({','.join('?' * len(values))})"


def old_entities(tables: PeerTables, keys: set[str]) -> dict[str, _Old]:
    out: dict[str, _Old] = {}
    ordered = sorted(keys)
    for i in range(0, len(ordered), 500):
        part = ordered[i : i + 500]
        sql = f"SELECT key, name, sources, text_hash, vector FROM lightrag_entities WHERE {_in('key', part)}"
        for key, name, sources, digest, vector in tables.read(sql, part):
            out[str(key)] = _Old(str(name), json.loads(sources), str(digest), bytes(vector))
    return out


def relations_touching(tables: PeerTables, keys: set[str]) -> list[tuple[Any, ...]]:
    """Full relation rows with an end among `keys`."""
    rows: list[tuple[Any, ...]] = []
    ordered = sorted(keys)
    for i in range(0, len(ordered), 400):
        part = ordered[i : i + 400]
        where = f"{_in('source', part)} OR {_in('target', part)}"
        rows += tables.read(f"SELECT * FROM lightrag_relations WHERE {where}", [*part, *part])
    return rows


def _pair(a: str, b: str) -> Pair:
    return (min(a, b), max(a, b))


def _as_relation(row: tuple[Any, ...]) -> Relation:
    source, target, keywords, description, strength, sources = row[:6]
    return Relation(str(source), str(target), tuple(json.loads(keywords)), str(description), float(strength),
                    tuple(json.loads(sources)))  # fmt: skip


def update_merged(
    host: PeerHost, added: dict[str, ChunkGraph], removed: dict[str, ChunkGraph], digest: str, report: PeerSync
) -> None:
    """Re-merge the rows the `added` and `removed` chunks touch and record `digest` as the merged state."""
    tables = host.tables
    keys, pairs = touched([*added.values(), *removed.values()])
    before = old_entities(tables, keys)
    old_rels = {_pair(r[0], r[1]): r for r in relations_touching(tables, keys)}
    chunks = set(added) | {s for o in before.values() for s in o.sources}
    chunks |= {s for p, r in old_rels.items() if p in pairs for s in json.loads(r[5])}
    entities, relations = merge(chunk_graphs(tables, sorted(chunks - set(removed))))
    fresh = [e for e in entities if e.key in keys]
    links = [r for r in relations if _pair(r.source, r.target) in pairs]
    renamed = {e.key for e in fresh if e.key in before and before[e.key].name != e.name}
    links += [_as_relation(r) for p, r in old_rels.items() if p not in pairs and renamed & set(p)]
    names = {e.key: e.name for e in fresh}
    for key, old in old_entities(tables, {k for r in links for k in (r.source, r.target)} - keys).items():
        names[key] = old.name
    known = {o.hash: o.vector for o in before.values()} | {str(r[6]): bytes(r[7]) for r in old_rels.values()}
    stale = Stale(keys, pairs | {_pair(r.source, r.target) for r in links})
    write(host, stale, (fresh, links, names), known, digest, report)


@dataclass(frozen=True)
class Stale:
    """The rows an update replaces: entity keys and unordered relation pairs (vanished ones included)."""

    keys: set[str]
    pairs: set[Pair]


def write(
    host: PeerHost,
    stale: Stale,
    merged: tuple[list[Entity], list[Relation], dict[str, str]],
    known: dict[str, bytes],
    digest: str,
    report: PeerSync,
) -> None:
    """Replace the `stale` rows with the `merged` ones (entities, relations, names for relation texts)."""
    fresh, links, names = merged
    entity_texts, relation_texts = [e.text() for e in fresh], [r.text(names) for r in links]
    vectors = vectors_for(host, [*entity_texts, *relation_texts], known)
    report.embedded = len({text_hash(t) for t in [*entity_texts, *relation_texts]} - set(known))
    with host.tables.transaction() as db:
        db.executemany("DELETE FROM lightrag_entities WHERE key = ?", [(k,) for k in sorted(stale.keys)])
        db.executemany(
            "DELETE FROM lightrag_relations WHERE (source = ? AND target = ?) OR (source = ? AND target = ?)",
            [(a, b, b, a) for a, b in sorted(stale.pairs)],
        )
        insert_merged(db, list(zip(fresh, entity_texts)), list(zip(links, relation_texts)), vectors, digest)
