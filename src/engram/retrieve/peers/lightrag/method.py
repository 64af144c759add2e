"""`lightrag`: LightRAG (Guo et al., 2024, "LightRAG: Simple and Fast Retrieval-Augmented Generation") as a
peer method over an engram memory, written from the paper and the project's documentation with engram's own
prompts. Index: per chunk, LLM entities (name, type, description) and relations (source, target, keywords,
description, strength), merged per entity and per pair, their descriptions embedded. Query: LLM high- and
low-level keywords; low-level keywords search entities, high-level keywords search relations; hybrid
interleaves the chunks of both. Parameters and where their defaults come from: docs/method.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engram.llm.cache import CachedChat
from engram.retrieve.context import RetrievalContext
from engram.retrieve.peers.base import PeerEstimate, PeerHost, PeerSync
from engram.retrieve.peers.chunk_extract import extraction_cost
from engram.retrieve.peers.lightrag import index as lightrag_index
from engram.retrieve.peers.lightrag import query as lightrag_query
from engram.store.peer_tables import PeerTables
from engram.store.rows import PassageRow
from engram.tokens import TokenCount, default_counter
from engram.types import Retrieval

# a gleaning request repeats the first exchange; before the first reply exists its length is assumed to be
# REPLY_SHARE times the passage's tokens (an assumption of the estimate, not a measurement)
REPLY_SHARE = 1.0


@dataclass(frozen=True)
class LightRAG:
    """`gleanings`: extra "what did you miss" requests per chunk (LightRAG's entity_extract_max_gleaning, 1);
    `top_entities`, `top_relations`: entities and relations retrieved per query (LightRAG's top_k, 60);
    `mode`: which side ranks the chunks: "local" (entities), "global" (relations) or "hybrid" (both)."""

    gleanings: int = 1
    top_entities: int = 60
    top_relations: int = 60
    owner: str = "lightrag"
    version: int = 1
    schema: str = lightrag_index.SCHEMA
    needs_llm: bool = True
    mode: str = "hybrid"

    def sync(self, host: PeerHost) -> PeerSync:
        return lightrag_index.sync(host, self.gleanings)

    def retrieve(self, ctx: RetrievalContext, tables: PeerTables, queries: list[str], k: int) -> list[Retrieval]:
        return lightrag_query.retrieve(ctx, tables, queries, k, self.top_entities, self.top_relations, self.mode)

    def stats(self, tables: PeerTables) -> dict[str, int]:
        return lightrag_index.stats(tables)

    def estimate(
        self, passages: Sequence[PassageRow], chat: CachedChat | None, count: TokenCount | None = None
    ) -> PeerEstimate:
        """Requests and input tokens of indexing `passages` (each content once): one extraction request per
        chunk and `gleanings` gleaning requests, each of which resends the conversation so far. A request whose
        reply is already in `chat`'s cache is counted in `cached_calls`, not in the tokens."""
        cost = extraction_cost(
            lightrag_index.EXTRACTION, passages, chat, count or default_counter(), self.gleanings, REPLY_SHARE
        )
        return PeerEstimate(self.owner, cost.chunks, cost.calls, cost.tokens, cost.cached)


METHOD = LightRAG()
# the same index searched by one side only (LightRAG's local and global query modes)
LOCAL = LightRAG(mode="local")
GLOBAL = LightRAG(mode="global")
