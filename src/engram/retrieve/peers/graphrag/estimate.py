"""What indexing a corpus for `graphrag-local` would send to the LLM, before anything is spent.

Extraction and gleaning are counted exactly as they would be sent (`chunk_extract.extraction_cost`). The summary
and report requests depend on what extraction finds, so:
- when every extraction request of the corpus is answered by the response cache (a memory indexed before, or a
  re-run), the build is replayed from the cached replies (merge, summary requests, communities, report
  requests) and each of its requests is looked up in the cache: the estimate is then exact;
- otherwise it rests on stated assumptions: `ENTITIES_PER_UNIT` distinct entities per text unit, of which
  `SHARED_SHARE` are met in several units and summarised (one request of the prompt and `DESCRIPTIONS`
  descriptions of `DESCRIPTION_TOKENS` tokens), and communities ~ entities / max_cluster_size, each report request
  the prompt and `max_cluster_size` entity rows and as many relationship rows of `ROW_TOKENS` tokens (at most
  the report budget).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from engram.errors import ExtractionError
from engram.llm.base import Message
from engram.llm.cache import CachedChat
from engram.llm.jsonparse import parse_json_object
from engram.retrieve.peers.chunk_extract import ExtractionCost
from engram.retrieve.peers.chunk_merge import ChunkGraph, merge
from engram.retrieve.peers.graphrag.graph import community_request, graph_of, links_by_node, summary_requests
from engram.retrieve.peers.graphrag.index import EXTRACTION, Settings
from engram.retrieve.peers.graphrag.leiden import hierarchical_leiden
from engram.retrieve.peers.graphrag.prompts import SUMMARY_SYSTEM, read_summary, report_messages
from engram.store.rows import PassageRow
from engram.tokens import TokenCount, message_tokens

ENTITIES_PER_UNIT = 5.0
SHARED_SHARE = 0.2
DESCRIPTIONS = 3
DESCRIPTION_TOKENS = 40
ROW_TOKENS = 50


def assumed(units: int, settings: Settings, count: TokenCount) -> tuple[int, int]:
    """(calls, input tokens) of the summary and report requests of `units` text units, by the assumptions."""
    entities = ENTITIES_PER_UNIT * units
    summaries = round(entities * SHARED_SHARE)
    summary_tokens = count(SUMMARY_SYSTEM) + DESCRIPTIONS * DESCRIPTION_TOKENS
    reports = round(entities / settings.max_cluster_size) if units else 0
    rows = 2 * settings.max_cluster_size * ROW_TOKENS
    report_tokens = min(message_tokens(report_messages([], []), count) + rows, settings.report_budget)
    return summaries + reports, summaries * summary_tokens + reports * report_tokens


class _Tally:
    def __init__(self, chat: CachedChat | None, count: TokenCount) -> None:
        self.chat, self.count = chat, count
        self.calls = self.tokens = self.cached = 0

    def ask(self, messages: list[Message]) -> str | None:
        """The cached reply, or None (counted as a request to send)."""
        reply = None if self.chat is None else self.chat.lookup(messages, json=True)
        if reply is None:
            self.calls, self.tokens = self.calls + 1, self.tokens + message_tokens(messages, self.count)
        else:
            self.cached += 1
        return reply


def _graph(replies: list[str]) -> ChunkGraph:
    graph = ChunkGraph()
    for reply in replies:
        try:
            more = EXTRACTION.read(parse_json_object(reply))
        except ExtractionError:
            break
        graph = ChunkGraph(graph.entities + more.entities, graph.relations + more.relations)
    return graph


def replayed(replies: dict[str, list[str]], settings: Settings, tally: _Tally) -> None:
    """Tally the summary and report requests of the build made from the cached extraction `replies`."""
    entities, relations = merge({h: _graph(r) for h, r in replies.items()})
    summaries: dict[str, str] = {}
    for key, messages in summary_requests(entities, relations).items():
        reply = tally.ask(messages)
        if reply is not None:
            with contextlib.suppress(ExtractionError):
                summaries[key] = read_summary(parse_json_object(reply))
    graph = graph_of(entities, relations, summaries)
    edges = [(lk.source, lk.target, lk.strength) for lk in graph.links]
    index, links_of = {n.key: n for n in graph.nodes}, links_by_node(graph)
    for c in hierarchical_leiden(list(index), edges, settings.max_cluster_size, settings.seed):
        if len(c.members) > 1:
            tally.ask(community_request(c, index, links_of, tally.count, settings.report_budget))


def estimate(
    passages: Sequence[PassageRow], extraction: ExtractionCost, chat: CachedChat | None, count: TokenCount,
    settings: Settings,
) -> tuple[int, int, int]:  # fmt: skip
    """(calls, input tokens, cached calls) of the whole build, extraction's included."""
    unique = {p.content_hash for p in passages}
    tally = _Tally(chat, count)
    if unique and set(extraction.replies) == unique:
        replayed(extraction.replies, settings, tally)
    else:
        tally.calls, tally.tokens = assumed(len(unique), settings, count)
    return extraction.calls + tally.calls, extraction.tokens + tally.tokens, extraction.cached + tally.cached
