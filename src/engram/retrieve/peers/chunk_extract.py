"""Per-chunk graph extraction shared by the peers that extract entities and relations from each passage
(LightRAG, GraphRAG): the extraction request with its gleaning requests, run concurrently; results stored per
passage content in the method's `<method>_chunks` table (`done` with the graph as JSON, or `failed` with the
reason, retried by the next sync); and the step that brings that table in step with the memory's alive
passages. What differs between methods is an `Extraction`: its prompts, its reply reader and its table."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram.errors import LLM_HINT, ExtractionError, LLMError
from engram.llm import aio
from engram.llm.base import ChatModel, Message, concurrency_of
from engram.llm.cache import CachedChat
from engram.llm.json_reply import JsonRequest, aask_json
from engram.llm.jsonparse import parse_json_object
from engram.retrieve.peers.base import PeerHost, PeerSync, alive_passages
from engram.retrieve.peers.chunk_merge import ChunkGraph, RawEntity, RawRelation
from engram.store.peer_tables import PeerTables
from engram.store.rows import PassageRow
from engram.tokens import TokenCount, message_tokens


def chunks_schema(table: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (content_hash TEXT PRIMARY KEY, "
        "status TEXT NOT NULL CHECK (status IN ('done', 'failed')), graph TEXT NOT NULL, error TEXT, "
        "updated REAL NOT NULL)"
    )


@dataclass(frozen=True)
class Extraction:
    """One method's extraction: `first(title, text)` the first request, `glean(messages, reply)` a gleaning
    request after the conversation so far, `read` the graph of a reply object, `table` its chunks table."""

    method: str
    table: str
    first: Callable[[str | None, str], list[Message]]
    glean: Callable[[list[Message], str], list[Message]]
    read: Callable[[dict[str, Any]], ChunkGraph]
    request: JsonRequest


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


def chunk_graphs(tables: PeerTables, hashes: list[str], table: str = "lightrag_chunks") -> dict[str, ChunkGraph]:
    """The stored extractions of the `done` chunks among `hashes`."""
    out: dict[str, ChunkGraph] = {}
    for start in range(0, len(hashes), 500):
        part = hashes[start : start + 500]
        marks = ",".join("?" * len(part))
        sql = f"SELECT content_hash, graph FROM {table} WHERE status = 'done' AND content_hash IN ({marks})"
        out.update({str(h): graph_of(str(g)) for h, g in tables.read(sql, part)})
    return out


def canonical(reply: str) -> str:
    """A reply as a gleaning request repeats it (the parsed object, re-serialised)."""
    try:
        return json.dumps(parse_json_object(reply), ensure_ascii=False, sort_keys=True)
    except ExtractionError:
        return reply


async def extract_chunk(chat: ChatModel, ex: Extraction, p: PassageRow, gleanings: int) -> ChunkGraph:
    """One chunk's entities and relations: the extraction request, then `gleanings` requests for what the
    replies so far missed (a gleaning reply that cannot be used ends the gleaning; the rest is kept)."""
    messages = ex.first(p.title, p.text)
    graph, obj = await aask_json(chat, messages, lambda o: (ex.read(o), o), ex.request)
    for _ in range(gleanings):
        messages = ex.glean(messages, json.dumps(obj, ensure_ascii=False, sort_keys=True))
        try:
            more, obj = await aask_json(chat, messages, lambda o: (ex.read(o), o), ex.request)
        except ExtractionError:
            break
        graph = ChunkGraph(graph.entities + more.entities, graph.relations + more.relations)
    return graph


async def _extract_all(
    host: PeerHost, chat: ChatModel, ex: Extraction, todo: Sequence[PassageRow], gleanings: int
) -> list[Any]:
    gate = asyncio.Semaphore(concurrency_of(chat))
    done = [0]

    async def one(p: PassageRow) -> ChunkGraph | str:
        async with gate:
            try:
                return await extract_chunk(chat, ex, p, gleanings)
            except (ExtractionError, LLMError) as exc:
                return f"{type(exc).__name__}: {exc}"
            finally:
                done[0] += 1
                if host.progress is not None:
                    host.progress(ex.method, done[0], len(todo))

    return list(await asyncio.gather(*(one(p) for p in todo)))


def extract_new(
    host: PeerHost, ex: Extraction, todo: Sequence[PassageRow], gleanings: int, report: PeerSync
) -> list[str]:
    """Extract `todo` and store each chunk's result; the content hashes of the chunks now done."""
    if host.chat is None:
        raise LLMError(f"{ex.method} indexes with an LLM: " + LLM_HINT)
    results = aio.run(_extract_all(host, host.chat, ex, todo, gleanings))
    now = time.time()
    rows = []
    for p, result in zip(todo, results):
        ok = isinstance(result, ChunkGraph)
        rows.append((p.content_hash, "done" if ok else "failed", graph_json(result) if ok else "{}",
                     None if ok else result, now))  # fmt: skip
    with host.tables.transaction() as db:
        db.executemany(
            f"INSERT OR REPLACE INTO {ex.table} (content_hash, status, graph, error, updated) VALUES (?, ?, ?, ?, ?)",
            rows,
        )
    report.extracted += sum(isinstance(r, ChunkGraph) for r in results)
    report.failed += sum(not isinstance(r, ChunkGraph) for r in results)
    return [p.content_hash for p, r in zip(todo, results) if isinstance(r, ChunkGraph)]


@dataclass
class ChunkStep:
    """What `step_chunks` changed: the done chunks before it, those it added, those it dropped (`gone`, every
    status) and the graphs of the dropped done ones; `pending` new chunks left for a sync with an LLM."""

    before: list[str]
    added: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    removed: dict[str, ChunkGraph] = field(default_factory=dict)
    pending: int = 0

    @property
    def done(self) -> list[str]:
        return sorted((set(self.before) - set(self.gone)) | set(self.added))


def step_chunks(host: PeerHost, ex: Extraction, gleanings: int, report: PeerSync) -> ChunkStep:
    """Extract the alive chunks not done yet (failed ones again) and drop the chunks no alive passage holds."""
    tables = host.tables
    alive = alive_passages(host.view)
    status = {str(h): str(s) for h, s in tables.read(f"SELECT content_hash, status FROM {ex.table}")}
    step = ChunkStep(sorted(h for h, s in status.items() if s == "done"))
    todo = [p for h, p in alive.items() if status.get(h) != "done"]
    step.gone = [h for h in status if h not in alive]
    step.removed = chunk_graphs(tables, [h for h in step.gone if status[h] == "done"], ex.table)
    if todo and host.chat is not None:  # without an LLM new chunks wait for the next sync that has one
        step.added = extract_new(host, ex, todo, gleanings, report)
    step.pending = 0 if host.chat is not None else len(todo)
    if step.gone:
        with tables.transaction() as db:
            db.executemany(f"DELETE FROM {ex.table} WHERE content_hash = ?", [(h,) for h in step.gone])
        report.removed = len(step.gone)
    return step


@dataclass(frozen=True)
class ExtractionCost:
    """Requests and input tokens of extracting some chunks (`cached`: requests the response cache answers;
    `replies`: the cached replies of the chunks whose every request is cached, by content hash)."""

    chunks: int = 0
    calls: int = 0
    tokens: int = 0
    cached: int = 0
    replies: dict[str, list[str]] = field(default_factory=dict)


def extraction_cost(
    ex: Extraction, passages: Sequence[PassageRow], chat: CachedChat | None, count: TokenCount, gleanings: int,
    reply_share: float,
) -> ExtractionCost:  # fmt: skip
    """One extraction request per chunk (each content once) and `gleanings` gleaning requests, each of which
    resends the conversation so far; before a reply exists its length is assumed to be `reply_share` times the
    passage's tokens. A request whose reply is already cached is counted in `cached`."""
    unique = list({p.content_hash: p for p in passages}.values())
    calls = tokens = cached = 0
    replies: dict[str, list[str]] = {}
    for p in unique:
        messages = ex.first(p.title, p.text)
        reply = None if chat is None else chat.lookup(messages, json=True)
        block = f"{p.title}\n{p.text}" if p.title else p.text
        assumed = int(reply_share * count(block)) + count(str(ex.glean([], "")[-1]["content"]))
        size, got = message_tokens(messages, count), list[str]()
        for _ in range(1 + gleanings):
            if reply is None:
                calls, tokens = calls + 1, tokens + size
                size += assumed
                continue
            cached, got = cached + 1, [*got, reply]
            messages = ex.glean(messages, canonical(reply))
            size = message_tokens(messages, count)
            reply = None if chat is None else chat.lookup(messages, json=True)
        if len(got) == 1 + gleanings:
            replies[p.content_hash] = got
    return ExtractionCost(len(unique), calls, tokens, cached, replies)
