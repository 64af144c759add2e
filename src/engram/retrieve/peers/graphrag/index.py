"""GraphRAG's index over a memory: per text unit (passage content) extraction into `graphrag_chunks`
(`chunk_extract`), then a build from every extracted unit: merge, description summaries (`graphrag_summaries`,
keyed by their request so only items whose descriptions changed are summarised again), entities with their
`name: description` embeddings, relationships, hierarchical Leiden communities and their LLM reports (reused
when a community's report request is unchanged). The build runs again when the set of extracted units changed,
or when a summary or report of the last build is missing (an LLM failure, or a write without an LLM)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engram.errors import ExtractionError, LLMError
from engram.llm import aio
from engram.llm.base import ChatModel, Message, concurrency_of
from engram.llm.json_reply import JsonRequest, aask_json
from engram.retrieve.peers.base import PeerHost, PeerSync
from engram.retrieve.peers.chunk_extract import Extraction, chunk_graphs, chunks_schema, step_chunks
from engram.retrieve.peers.chunk_merge import merge
from engram.retrieve.peers.graphrag.graph import (
    Graph,
    community_request,
    graph_of,
    links_by_node,
    request_hash,
    summary_requests,
)
from engram.retrieve.peers.graphrag.leiden import SEED, Community, hierarchical_leiden, libraries
from engram.retrieve.peers.graphrag.prompts import (
    Report,
    extract_messages,
    glean_messages,
    read_extraction,
    read_report,
    read_summary,
)
from engram.retrieve.peers.lightrag.rows import digest_of, text_hash, vectors_for
from engram.store.peer_tables import PeerTables
from engram.tokens import default_counter

SCHEMA = (
    chunks_schema("graphrag_chunks")
    + """;
CREATE TABLE IF NOT EXISTS graphrag_summaries (request_hash TEXT PRIMARY KEY, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS graphrag_entities (
    key TEXT PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, description TEXT NOT NULL, sources TEXT NOT NULL,
    degree INTEGER NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS graphrag_relationships (
    source TEXT NOT NULL, target TEXT NOT NULL, description TEXT NOT NULL, strength REAL NOT NULL,
    sources TEXT NOT NULL, PRIMARY KEY (source, target));
CREATE TABLE IF NOT EXISTS graphrag_communities (
    id INTEGER PRIMARY KEY, level INTEGER NOT NULL, parent INTEGER NOT NULL, members TEXT NOT NULL,
    request_hash TEXT, status TEXT NOT NULL CHECK (status IN ('done', 'failed', 'none')), report TEXT, error TEXT);
CREATE TABLE IF NOT EXISTS graphrag_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
)
METHOD = "graphrag-local"
EXTRACTION = Extraction(
    METHOD,
    "graphrag_chunks",
    extract_messages,
    glean_messages,
    read_extraction,
    JsonRequest(what="GraphRAG extraction"),
)
SUMMARY = JsonRequest(what="GraphRAG description summary")
REPORT = JsonRequest(what="GraphRAG community report")


@dataclass(frozen=True)
class Settings:
    gleanings: int = 1
    max_cluster_size: int = 10
    report_budget: int = 8000
    seed: int = SEED


def state(tables: PeerTables) -> dict[str, str]:
    return {str(k): str(v) for k, v in tables.read("SELECT key, value FROM graphrag_state")}


def sync(host: PeerHost, settings: Settings) -> PeerSync:
    """Extract the alive units not done yet and drop those no alive passage holds; build again when the units
    changed, or when the last build missed a summary or a report and an LLM is here to retry them."""
    libraries()  # before anything is spent: the build needs the peers extra
    report = PeerSync(METHOD)
    step = step_chunks(host, EXTRACTION, settings.gleanings, report)
    digest = digest_of(step.done)
    held = state(host.tables)
    if held.get("merged") != digest or (held.get("complete") != "1" and host.chat is not None):
        build(host, step.done, digest, settings, report)
    report.stats = {**stats(host.tables), "pending": step.pending}
    return report


@dataclass
class Asked:
    """Replies read by request key, and the reason for each request that failed."""

    replies: dict[str, Any]
    failed: dict[str, str]


async def _ask_all(
    host: PeerHost, chat: ChatModel, requests: Mapping[str, list[Message]], read: Callable[[dict[str, Any]], Any],
    kind: JsonRequest, stage: str,
) -> Asked:  # fmt: skip
    gate = asyncio.Semaphore(concurrency_of(chat))
    out, done = Asked({}, {}), [0]

    async def one(key: str) -> None:
        async with gate:
            try:
                out.replies[key] = await aask_json(chat, requests[key], read, kind)
            except (ExtractionError, LLMError) as exc:
                out.failed[key] = f"{type(exc).__name__}: {exc}"
            finally:
                done[0] += 1
                if host.progress is not None:
                    host.progress(stage, done[0], len(requests))

    await asyncio.gather(*(one(k) for k in sorted(requests)))
    return out


def ask_all(
    host: PeerHost, requests: Mapping[str, list[Message]], read: Callable[[dict[str, Any]], Any], kind: JsonRequest,
    stage: str,
) -> Asked:  # fmt: skip
    """`read` of each request's reply by key, or the reason it failed; nothing asked without an LLM."""
    if host.chat is None or not requests:
        return Asked({}, {k: "no LLM: retried by the next write with one" for k in requests})
    return aio.run(_ask_all(host, host.chat, requests, read, kind, stage))


def summarise(host: PeerHost, requests: Mapping[str, list[Message]]) -> tuple[dict[str, str], int]:
    """Summaries by request hash (stored ones reused, the others asked) and how many are missing (failed)."""
    stored = {str(h): str(d) for h, d in host.tables.read("SELECT request_hash, description FROM graphrag_summaries")}
    asked = ask_all(host, {h: m for h, m in requests.items() if h not in stored}, read_summary, SUMMARY,
                    f"{METHOD} summaries")  # fmt: skip
    kept = {h: stored[h] for h in requests if h in stored} | {h: str(d) for h, d in asked.replies.items()}
    with host.tables.transaction() as db:
        db.execute("DELETE FROM graphrag_summaries")
        db.executemany("INSERT INTO graphrag_summaries VALUES (?, ?)", sorted(kept.items()))
    return kept, len(asked.failed)


@dataclass(frozen=True)
class ReportRow:
    community: Community
    request_hash: str | None  # None: no report (a community of one entity)
    status: str
    report: Report | None
    error: str | None


def community_reports(host: PeerHost, graph: Graph, communities: list[Community], budget: int) -> list[ReportRow]:
    """One report per community of two or more entities; a report whose request did not change is reused."""
    count, by_key, links_of = default_counter(), {n.key: n for n in graph.nodes}, links_by_node(graph)
    old = {str(h): Report.of_json(str(r)) for h, r in host.tables.read(
        "SELECT request_hash, report FROM graphrag_communities WHERE status = 'done'")}  # fmt: skip
    requests = {c.id: community_request(c, by_key, links_of, count, budget) for c in communities if len(c.members) > 1}
    hashes = {cid: request_hash(m) for cid, m in requests.items()}
    todo = {h: requests[cid] for cid, h in hashes.items() if h not in old}
    asked = ask_all(host, todo, read_report, REPORT, f"{METHOD} reports")
    found = old | asked.replies
    rows = []
    for c in communities:
        h = hashes.get(c.id)
        if h is None:
            rows.append(ReportRow(c, None, "none", None, None))
        elif h in found:
            rows.append(ReportRow(c, h, "done", found[h], None))
        else:
            rows.append(ReportRow(c, h, "failed", None, asked.failed.get(h, "no reply")))
    return rows


def build(host: PeerHost, done: list[str], digest: str, settings: Settings, report: PeerSync) -> None:
    tables = host.tables
    entities, relations = merge(chunk_graphs(tables, done, "graphrag_chunks"))
    requests = summary_requests(entities, relations)
    summaries, unsummarised = summarise(host, requests)
    graph = graph_of(entities, relations, summaries)
    texts = [n.text() for n in graph.nodes]
    known = {str(h): bytes(v) for h, v in tables.read("SELECT text_hash, vector FROM graphrag_entities")}
    vectors = vectors_for(host, texts, known)
    report.embedded = len({text_hash(t) for t in texts} - set(known))
    edges = [(lk.source, lk.target, lk.strength) for lk in graph.links]
    communities = hierarchical_leiden([n.key for n in graph.nodes], edges, settings.max_cluster_size, settings.seed)
    rows = community_reports(host, graph, communities, settings.report_budget)
    complete = unsummarised == 0 and all(r.status != "failed" for r in rows)
    with tables.transaction() as db:
        for table in ("graphrag_entities", "graphrag_relationships", "graphrag_communities"):
            db.execute(f"DELETE FROM {table}")
        db.executemany(
            "INSERT INTO graphrag_entities VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(n.key, n.name, n.type, n.description, json.dumps(list(n.sources)), n.degree, text_hash(t),
              vectors[text_hash(t)]) for n, t in zip(graph.nodes, texts)],
        )  # fmt: skip
        db.executemany(
            "INSERT INTO graphrag_relationships VALUES (?, ?, ?, ?, ?)",
            [(lk.source, lk.target, lk.description, lk.strength, json.dumps(list(lk.sources))) for lk in graph.links],
        )
        db.executemany(
            "INSERT INTO graphrag_communities VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(r.community.id, r.community.level, r.community.parent, json.dumps(list(r.community.members)),
              r.request_hash, r.status, None if r.report is None else r.report.as_json(), r.error) for r in rows],
        )  # fmt: skip
        marks = {"merged": digest, "complete": "1" if complete else "0", "built": f"{digest}:{time.time_ns()}"}
        db.executemany("INSERT OR REPLACE INTO graphrag_state (key, value) VALUES (?, ?)", sorted(marks.items()))


def stats(tables: PeerTables) -> dict[str, int]:
    def count(sql: str) -> int:
        return int(tables.read(sql)[0][0])

    return {
        "chunks": count("SELECT COUNT(*) FROM graphrag_chunks WHERE status = 'done'"),
        "failed": count("SELECT COUNT(*) FROM graphrag_chunks WHERE status = 'failed'"),
        "entities": count("SELECT COUNT(*) FROM graphrag_entities"),
        "relationships": count("SELECT COUNT(*) FROM graphrag_relationships"),
        "summaries": count("SELECT COUNT(*) FROM graphrag_summaries"),
        "communities": count("SELECT COUNT(*) FROM graphrag_communities"),
        "levels": count("SELECT COUNT(DISTINCT level) FROM graphrag_communities"),
        "reports": count("SELECT COUNT(*) FROM graphrag_communities WHERE status = 'done'"),
        "failed_reports": count("SELECT COUNT(*) FROM graphrag_communities WHERE status = 'failed'"),
    }
