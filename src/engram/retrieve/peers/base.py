"""What a peer retrieval method is (`PeerMethod`), what its indexing may use of a memory (`PeerHost`, the narrow
interface `Memory` hands it), and the cost accounting every method shares (`measured`)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from engram.index.view.graph_index import GraphIndex
from engram.llm.base import ChatModel
from engram.llm.cache import CachedChat
from engram.llm.usage import usage_of
from engram.retrieve.context import EmbedFn, RetrievalContext
from engram.store.peer_tables import PeerTables
from engram.store.rows import PassageRow
from engram.tokens import TokenCount
from engram.types import Progress, Retrieval


@dataclass(frozen=True)
class PeerHost:
    """What a peer method's indexing sees of a memory: the committed view (its alive passages), the
    embedder, the memory's chat model (through the response cache and the usage ledger; None without an LLM),
    the peer tables and an optional progress callback."""

    view: GraphIndex
    embed: EmbedFn
    dim: int
    chat: ChatModel | None
    tables: PeerTables
    progress: Progress | None = None


@dataclass
class PeerSync:
    """What bringing a method's tables in step with the memory's passages did."""

    method: str
    extracted: int = 0
    failed: int = 0
    removed: int = 0
    embedded: int = 0
    stats: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PeerEstimate:
    """Indexing cost of a method before anything is spent: passages to process, LLM requests and their input
    tokens; `cached_calls` are requests the response cache will answer."""

    method: str
    passages: int = 0
    calls: int = 0
    input_tokens: int = 0
    cached_calls: int = 0

    def as_dict(self) -> dict[str, int | str]:
        return {
            "method": self.method,
            "passages": self.passages,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "cached_calls": self.cached_calls,
        }


class PeerMethod(Protocol):
    """A retrieval method with its own index beside the shared one. `owner` names the tables (several method
    names may share one index); `version` is the version of those tables (docs/format.md)."""

    owner: str
    version: int
    schema: str
    needs_llm: bool

    def sync(self, host: PeerHost) -> PeerSync: ...
    def retrieve(self, ctx: RetrievalContext, tables: PeerTables, queries: list[str], k: int) -> list[Retrieval]: ...
    def estimate(
        self, passages: Sequence[PassageRow], chat: CachedChat | None, count: TokenCount | None = None
    ) -> PeerEstimate: ...
    def stats(self, tables: PeerTables) -> dict[str, int]: ...


def alive_passages(view: GraphIndex) -> dict[str, PassageRow]:
    """The alive passages by content hash (the first passage of each content); built once per view (read-only)."""

    def build() -> dict[str, PassageRow]:
        out: dict[str, PassageRow] = {}
        for p, alive in zip(view.passages, view.passage_alive.tolist()):
            if alive and p.content_hash not in out:
                out[p.content_hash] = p
        return out

    return view.memo("peers.alive_passages", build)


def passages_of(view: GraphIndex) -> dict[str, list[int]]:
    """Alive passage rows by content hash; built once per view (read-only)."""

    def build() -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for row, (p, alive) in enumerate(zip(view.passages, view.passage_alive.tolist())):
            if alive:
                out.setdefault(p.content_hash, []).append(row)
        return out

    return view.memo("peers.passages_of", build)


@contextmanager
def measured(tables: PeerTables, method: str, phase: str, chat: object) -> Iterator[None]:
    """Adds what the block spent to the method's `peer_costs` row of `phase`: LLM calls, prompt and
    completion tokens and cache hits (the difference of `chat`'s usage counters, so calls made by other
    threads on the same chat model meanwhile are counted too), wall seconds, and one run."""
    before, start = usage_of(chat), time.perf_counter()
    try:
        yield
    finally:
        spent = usage_of(chat) - before
        tables.add_cost(
            method,
            phase,
            {
                "runs": 1,
                "calls": spent.calls,
                "prompt_tokens": spent.prompt_tokens,
                "completion_tokens": spent.completion_tokens,
                "cache_hits": spent.cache_hits,
                "seconds": time.perf_counter() - start,
            },
        )
