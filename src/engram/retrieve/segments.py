"""Segments instead of passages: relevant segment extraction (`engram.retrieve.rse`) over any ranking.

The base method ranks `RSEParams.candidates` passages; every alive passage of the documents they belong to
is laid out in document order (chunk index from the passage id `<doc id>#<i>`, a one-chunk document's id
being the document id), valued, and the best runs of adjacent chunks are returned within a token budget.
Token counts are those of `engram.tokens` (the tokenizer named by $ENGRAM_TOKENIZER, else the offline
estimate): the budget is about the reader LLM's context. A document of one passage (MuSiQue's) can only give
one-passage segments: RSE then reduces to choosing passages by value until the budget is spent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engram.errors import InputError
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.context import RetrievalContext
from engram.retrieve.rse import RSEParams, best_segments, chunk_values, relevance
from engram.store.records import PassageRow
from engram.types import Retrieval, RetrievedPassage

DEFAULT_BUDGET_TOKENS = 6000  # dsRAG's 30 chunks of ~200 tokens (engram.retrieve.rse)
BASES = ("hipporag2", "hipporag2-paper", "dense", "bm25")


@dataclass(frozen=True)
class Segment:
    """Adjacent passages of one document, in order; `value` is the sum of their RSE values."""

    doc_id: str
    title: str | None
    passages: list[RetrievedPassage]
    value: float
    tokens: int

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.passages)


@dataclass(frozen=True)
class Segments:
    query: str
    segments: list[Segment]
    base: str


def check_request(base: str, budget_tokens: int) -> None:
    if base not in BASES:
        raise InputError(f"segments need a base ranking among {', '.join(BASES)}, not {base!r}")
    if budget_tokens < 1:
        raise InputError("budget_tokens must be at least 1")


def segments_for(
    ctx: RetrievalContext,
    rankings: list[Retrieval],
    base: str,
    budget_tokens: int,
    params: RSEParams | None = None,
    count: Callable[[str], int] | None = None,
) -> list[Segments]:
    """The best segments per query over its ranking by `base` (`params.candidates` passages deep), at most
    `budget_tokens` tokens in all."""
    from engram.tokens import default_counter

    check_request(base, budget_tokens)
    counter = count or default_counter()
    params = params or RSEParams()
    layout = _DocumentOrder(ctx.view)
    return [Segments(r.query, _segments(r, layout, budget_tokens, params, counter), base) for r in rankings]


def _segments(
    ranking: Retrieval, layout: _DocumentOrder, budget: int, params: RSEParams, count: Callable[[str], int]
) -> list[Segment]:
    docs = list(dict.fromkeys(p.doc_id for p in ranking.passages))
    rows = [row for doc in docs for row in layout.rows(doc)]
    if not rows:
        return []
    rank = {p.id: i for i, p in enumerate(ranking.passages)}
    rel = dict(zip(rank, relevance([p.score for p in ranking.passages]).tolist()))
    chunks = [layout.view.passages[r] for r in rows]
    ranks = [rank.get(c.id, -1) for c in chunks]
    values = chunk_values(ranks, [rel.get(c.id, 0.0) for c in chunks], params)
    lengths = [count(c.text) for c in chunks]
    runs = best_segments(
        values, [c.doc_id for c in chunks], lengths, budget, params.max_segment_tokens, params.minimum_value
    )
    return [_segment(chunks[a:b], float(values[a:b].sum()), sum(lengths[a:b])) for a, b in runs]


def _segment(chunks: list[PassageRow], value: float, tokens: int) -> Segment:
    passages = [RetrievedPassage(c.id, c.doc_id, c.title, c.text, value, dict(c.metadata)) for c in chunks]
    return Segment(chunks[0].doc_id, chunks[0].title, passages, value, tokens)


class _DocumentOrder:
    """Alive passage rows of each document, in chunk order (built once per call, on first use)."""

    def __init__(self, view: GraphIndex) -> None:
        self.view = view
        self._by_doc: dict[str, list[tuple[int, int]]] | None = None

    def rows(self, doc_id: str) -> list[int]:
        if self._by_doc is None:
            self._by_doc = {}
            for row, p in enumerate(self.view.passages):
                if self.view.passage_alive[row]:
                    self._by_doc.setdefault(p.doc_id, []).append((_chunk_index(p), row))
        return [row for _, row in sorted(self._by_doc.get(doc_id, []))]


def _chunk_index(p: PassageRow) -> int:
    if p.id.startswith(p.doc_id + "#"):
        suffix = p.id[len(p.doc_id) + 1 :]
        if suffix.isdigit():
            return int(suffix)
    return 0


def as_retrievals(found: list[Segments], k: int, method: str) -> list[Retrieval]:
    """Segments flattened to ranked passages (best segment first, each in document order), at most `k`: how
    the `rse-<base>` methods answer `retrieve` and `engram eval`."""
    return [Retrieval(s.query, [p for seg in s.segments for p in seg.passages][:k], method) for s in found]
