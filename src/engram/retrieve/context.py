"""What a retrieval method needs, and nothing more: the index view of one generation, an embed function, the
retrieval settings, an optional chat model and the BM25 index. `Memory` builds one per call; retrieval code
never sees `Memory` itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from engram.config import RetrieveConfig
from engram.embed.base import Embedder, Role, Vectors
from engram.index.view.bm25 import BM25Index
from engram.index.view.graph_index import GraphIndex
from engram.llm.base import ChatModel
from engram.store.peer_tables import PeerTables

EmbedFn = Callable[[Sequence[str], Role], Vectors]


@dataclass(frozen=True)
class RetrievalContext:
    """`view` is frozen for the call; `bm25` builds (or returns the cached) BM25 index of the same view; `tables`
    hold the peer methods' indexes."""

    view: GraphIndex
    embed: EmbedFn
    dim: int
    config: RetrieveConfig
    bm25: Callable[[], BM25Index]
    chat: ChatModel | None = None
    tables: PeerTables | None = None  # the peer methods' tables (engram.retrieve.peers); None on PostgreSQL

    def embed_queries(self, queries: Sequence[str]) -> Vectors:
        return self.embed(list(queries), "query")

    def with_config(self, config: RetrieveConfig | None) -> RetrievalContext:
        return self if config is None else replace(self, config=config)


def embed_fn(embedder: Embedder) -> EmbedFn:
    def embed(texts: Sequence[str], role: Role) -> Vectors:
        return embedder.embed(list(texts), role=role)

    return embed
