"""`graphrag-local`: GraphRAG's local search (Edge et al., 2024, "From Local to Global: A Graph RAG Approach to
Query-Focused Summarization", and the GraphRAG project's documentation of local search) as a peer method over an
engram memory, written from those descriptions with engram's own prompts. Index: per text unit (passage), LLM
entities and relationships with descriptions and strengths; merged per name and pair, several descriptions
summarised by the LLM; entity descriptions embedded; hierarchical Leiden communities with an LLM report each.
Query (no LLM): entities by description embedding, then community reports, entities, relationships and text
units within token shares. Parameters and where their defaults come from: docs/method.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engram.llm.cache import CachedChat
from engram.retrieve.context import RetrievalContext
from engram.retrieve.peers.base import PeerEstimate, PeerHost, PeerSync
from engram.retrieve.peers.chunk_extract import extraction_cost
from engram.retrieve.peers.graphrag import index as graphrag_index
from engram.retrieve.peers.graphrag import query as graphrag_query
from engram.retrieve.peers.graphrag.context import Budget
from engram.retrieve.peers.graphrag.estimate import estimate
from engram.retrieve.peers.graphrag.index import Settings
from engram.retrieve.peers.graphrag.leiden import libraries
from engram.store.peer_tables import PeerTables
from engram.store.rows import PassageRow
from engram.tokens import TokenCount, default_counter
from engram.types import Retrieval

# before the first extraction reply exists, a gleaning request's repeat of it is assumed to be REPLY_SHARE times
# the passage's tokens (an assumption of the estimate, as for lightrag)
REPLY_SHARE = 1.0


@dataclass(frozen=True)
class GraphRAGLocal:
    """`settings`: gleanings (1), max_cluster_size (10), report_budget (8,000 tokens), Leiden seed;
    `top_k_entities`: entities selected per query (10); `budget`: the context's token budget and shares;
    `community_level`: the deepest community level whose reports local search reads (2)."""

    settings: Settings = field(default_factory=Settings)
    top_k_entities: int = 10
    budget: Budget = field(default_factory=Budget)
    community_level: int = 2
    owner: str = "graphrag"
    version: int = 1
    schema: str = graphrag_index.SCHEMA
    needs_llm: bool = True
    query_llm: bool = False

    def ready(self) -> None:
        """Raises `InputError` naming `pip install 'engram[peers]'` when igraph or leidenalg is missing."""
        libraries()

    def sync(self, host: PeerHost) -> PeerSync:
        return graphrag_index.sync(host, self.settings)

    def retrieve(self, ctx: RetrievalContext, tables: PeerTables, queries: list[str], k: int) -> list[Retrieval]:
        return graphrag_query.retrieve(ctx, tables, queries, k, self.top_k_entities, self.budget, self.community_level)

    def stats(self, tables: PeerTables) -> dict[str, int]:
        return graphrag_index.stats(tables)

    def estimate(
        self, passages: Sequence[PassageRow], chat: CachedChat | None, count: TokenCount | None = None
    ) -> PeerEstimate:
        """Requests and input tokens of indexing `passages` (each content once): extraction and gleaning per
        unit, then summaries and community reports (`graphrag.estimate`: replayed from the cache when every
        extraction is cached, else by stated assumptions). Cached requests count in `cached_calls`."""
        counter = count or default_counter()
        cost = extraction_cost(graphrag_index.EXTRACTION, passages, chat, counter, self.settings.gleanings, REPLY_SHARE)
        calls, tokens, cached = estimate(passages, cost, chat, counter, self.settings)
        return PeerEstimate(graphrag_index.METHOD, cost.chunks, calls, tokens, cached)


METHOD = GraphRAGLocal()
