"""Peer retrieval methods (structure-augmented RAG systems re-implemented over an engram memory): a registry
from method name to the module that implements it, imported on first use, and the calls `Memory`, the CLI and
`engram eval` make on them. Each method keeps its own tables in the memory's engram.sqlite
(`engram.store.peer_tables`) and is kept in step with the memory's passages by `sync_all` after every write.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module

from engram.errors import LLM_HINT, InputError, LLMError
from engram.llm.cache import CachedChat
from engram.retrieve.context import RetrievalContext
from engram.retrieve.peers.base import PeerEstimate, PeerHost, PeerMethod, PeerSync, measured
from engram.store.peer_tables import PeerTables
from engram.store.rows import PassageRow
from engram.tokens import TokenCount
from engram.types import Retrieval

__all__ = ["PEERS", "PeerEstimate", "PeerHost", "PeerMethod", "PeerSync", "add", "estimate", "peer", "sync_all"]

# method name -> module whose `METHOD` implements it ("module:NAME": the module's NAME instead; names sharing
# one index, such as LightRAG's query modes, share an owner)
PEERS = {
    "lightrag": "engram.retrieve.peers.lightrag.method",
    "lightrag-local": "engram.retrieve.peers.lightrag.method:LOCAL",
    "lightrag-global": "engram.retrieve.peers.lightrag.method:GLOBAL",
    "graphrag-local": "engram.retrieve.peers.graphrag.method",
    "raptor": "engram.retrieve.peers.raptor.method",
}


def peer(name: str) -> PeerMethod:
    if name not in PEERS:
        raise InputError(f"unknown peer method {name!r}; choose one of {', '.join(PEERS)}")
    module, _, attr = PEERS[name].partition(":")
    method: PeerMethod = getattr(import_module(module), attr or "METHOD")
    return method


def enabled(tables: PeerTables) -> list[str]:
    """The peer indexes the memory holds, each by the first method name that owns it."""
    held = tables.methods()
    owners = {name: peer(name).owner for name in PEERS}
    return [name for name, owner in owners.items() if owner in held and name == _first(owners, owner)]


def _first(owners: dict[str, str], owner: str) -> str:
    return next(name for name, held in owners.items() if held == owner)


def add(name: str, host: PeerHost, require_llm: bool = True, rebuild: bool = False) -> PeerSync:
    """Create `name`'s tables if the memory lacks them and index every alive passage into them. Without
    `require_llm`, a method that needs an LLM on a memory without one only follows deletions (new passages wait
    for a sync with an LLM: `PeerSync.stats["pending"]`). `rebuild`: build the index again from scratch, for a
    method whose index depends on the order of writes (it has an optional `rebuild(host)`, e.g. raptor)."""
    method = peer(name)
    again = getattr(method, "rebuild", None) if rebuild else None
    if rebuild and again is None:
        raise InputError(f"{name} has no rebuild: its index follows every write already (drop the option)")
    if require_llm and method.needs_llm and host.chat is None:
        raise LLMError(f"{name} indexes with an LLM: " + LLM_HINT)
    ready = getattr(method, "ready", None)  # a method needing an extra says so before its tables exist
    if ready is not None:
        ready()
    host.tables.ensure(method.owner, method.version, method.schema)
    with measured(host.tables, method.owner, "index", host.chat):
        return method.sync(host) if again is None else again(host)


def sync_all(host: PeerHost) -> list[PeerSync]:
    """Bring every method the memory holds in step with its passages (after index, update, delete, extract)."""
    return [add(name, host, require_llm=False) for name in enabled(host.tables)]


def retrieve(ctx: RetrievalContext, name: str, queries: list[str], k: int) -> list[Retrieval]:
    method = peer(name)
    tables = ctx.tables
    if tables is None:
        raise InputError(f"{name} keeps its index in a memory directory; PostgreSQL memories do not hold peer methods")
    _check_added(tables, name, method.owner)
    if getattr(method, "query_llm", method.needs_llm) and ctx.chat is None:  # a method may index with an LLM only
        raise LLMError(f"{name} asks the LLM at query time: set ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL")
    with measured(tables, method.owner, "query", ctx.chat):
        return method.retrieve(ctx, tables, queries, k)


def _check_added(tables: PeerTables, name: str, owner: str) -> None:
    if owner not in tables.methods():
        raise InputError(
            f"this memory has no {name} index: add it with Memory.add_method({name!r}) "
            f"or `engram add-method {name} --memory DIR`"
        )


def estimate(
    name: str, passages: Sequence[PassageRow], chat: CachedChat | None = None, count: TokenCount | None = None
) -> PeerEstimate:
    return peer(name).estimate(passages, chat, count)


def costs(tables: PeerTables, name: str) -> dict[str, object]:
    """What `name` spent on this memory: per phase (index, query) runs, LLM calls, tokens, cache hits and
    seconds; the disk its tables take; and its index's size."""
    method = peer(name)
    _check_added(tables, name, method.owner)
    return {
        "phases": tables.costs(method.owner),
        "disk_bytes": tables.disk_bytes(method.owner),
        "index": method.stats(tables),
    }
