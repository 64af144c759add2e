"""`raptor`: RAPTOR (Sarthi et al., 2024, "RAPTOR: Recursive Abstractive Processing for Tree-Organized
Retrieval") as a peer method over an engram memory, written from the paper with engram's own prompt. Index: the
memory's passages are the leaves; UMAP + Gaussian-mixture soft clustering (global, then local; oversized
clusters again), one LLM summary per cluster, the summaries embedded and clustered again, up to a few layers
(`raptor.cluster`, `raptor.tree`). Query: the collapsed tree, every node ranked by cosine and taken up to a token
budget, mapped to passages (`raptor.query`). Parameters and where their defaults come from: docs/method.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engram.llm.cache import CachedChat
from engram.retrieve.context import RetrievalContext
from engram.retrieve.peers.base import PeerEstimate, PeerHost, PeerSync
from engram.retrieve.peers.lightrag.prompts import passage_block
from engram.retrieve.peers.raptor import query as raptor_query
from engram.retrieve.peers.raptor import tree as raptor_tree
from engram.retrieve.peers.raptor.cluster import check_installed
from engram.retrieve.peers.raptor.prompts import summary_messages
from engram.retrieve.peers.raptor.tree import Settings
from engram.store.peer_tables import PeerTables
from engram.store.rows import PassageRow
from engram.tokens import TokenCount, default_counter, message_tokens
from engram.types import Retrieval

# the estimate's assumed length of one summary, in tokens (RAPTOR's summarization_length, 100)
SUMMARY_TOKENS = 100


@dataclass(frozen=True)
class Raptor:
    """`settings`: clustering and depth (`raptor.tree.Settings`); `budget`: the collapsed tree's context in
    tokens (2,000, RAPTOR's best collapsed-tree setting)."""

    settings: Settings = field(default_factory=Settings)
    budget: int = 2000
    owner: str = "raptor"
    version: int = 1
    schema: str = raptor_tree.SCHEMA
    needs_llm: bool = True
    query_llm: bool = False

    def ready(self) -> None:
        """Raises `MissingDependencyError` naming `pip install 'engram[peers]'` when UMAP or scikit-learn is
        missing, before the method's tables are made."""
        check_installed()

    def sync(self, host: PeerHost) -> PeerSync:
        return raptor_tree.sync(host, self.settings)

    def rebuild(self, host: PeerHost) -> PeerSync:
        """Cluster every leaf again from scratch (`Memory.add_method("raptor", rebuild=True)`), so the tree
        reflects the whole corpus instead of the order of its writes; stored summaries whose cluster came out
        the same are reused without asking."""
        return raptor_tree.sync(host, self.settings, rebuild=True)

    def retrieve(self, ctx: RetrievalContext, tables: PeerTables, queries: list[str], k: int) -> list[Retrieval]:
        return raptor_query.retrieve(ctx, tables, queries, k, self.budget)

    def stats(self, tables: PeerTables) -> dict[str, int]:
        return raptor_tree.stats(tables)

    def estimate(
        self, passages: Sequence[PassageRow], chat: CachedChat | None, count: TokenCount | None = None
    ) -> PeerEstimate:
        """Requests and input tokens of building the tree over `passages` (each content once), without
        clustering: a layer of m nodes averaging t tokens is assumed to make ceil(m / c) clusters of
        c = max(2, min(`dim` + 1, B // t)) nodes each, B the re-clustering budget (3,500), each node sent once.
        About `dim` + 1 nodes a cluster is what the mixture's component cap (n / (d + 1)) tends to give
        (bench/bench_raptor.py, docs/method.md); soft membership sends some nodes twice, so input tokens are a
        little low. Summaries are assumed `SUMMARY_TOKENS` long; layers stop as the build does (at most `dim` + 1
        nodes, `max_layers`). The response cache is not consulted: which clusters it holds is known only by
        clustering."""
        counter = count or default_counter()
        unique = {p.content_hash: p for p in passages}
        sizes = [counter(passage_block(p.title, p.text)) for p in unique.values()]
        overhead = message_tokens(summary_messages([]), counter)
        per_text = counter("Text 100:\n\n\n")
        calls = tokens = 0
        for _ in range(self.settings.max_layers):
            if len(sizes) <= self.settings.clustering.dim + 1:
                break
            mean = max(1, sum(sizes) // len(sizes))
            c = self.settings.clustering
            clusters = -(-len(sizes) // max(2, min(c.dim + 1, c.max_tokens // mean)))
            calls += clusters
            tokens += sum(sizes) + len(sizes) * per_text + clusters * overhead
            sizes = [SUMMARY_TOKENS] * clusters
        return PeerEstimate(self.owner, len(unique), calls, tokens, 0)


METHOD = Raptor()
