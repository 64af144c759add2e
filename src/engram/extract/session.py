"""`LLMSession`: a memory's side of its chat model: the response cache, the usage ledger, budgets and
estimates. `Memory` owns one while an LLM is configured; `Memory.stats()["llm"]` reads `usage_stats`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engram.extract.claims import ClaimSettings
from engram.extract.openie import extractor_identity
from engram.extract.planning import ExtractionEstimate, estimate_extraction
from engram.extract.runner import ExtractionRun, extract_pending, unfinished
from engram.llm.base import ChatModel
from engram.llm.cache import CachedChat
from engram.llm.usage import UsageLedger
from engram.store.base import Store
from engram.store.rows import PassageRow
from engram.types import Progress


class LLMSession:
    def __init__(self, store: Store, llm: ChatModel) -> None:
        self.store = store
        self.llm = llm
        self.chat = CachedChat(llm, store)
        # query-time calls (filter, reader, query NER): the same cache and counts, the query-time budget
        for_queries = getattr(llm, "for_queries", None)
        query_llm = for_queries() if callable(for_queries) else llm
        self.query_chat = CachedChat(query_llm, store, self.chat.hit_counter)
        self.ledger = UsageLedger(store, self.chat, llm.identity)

    def extract(
        self,
        passages: Sequence[PassageRow],
        progress: Progress | None = None,
        max_tokens: int | None = None,
        claims: ClaimSettings | None = None,
    ) -> ExtractionRun:
        """Extract the unfinished ones of `passages` through the cache, within `max_tokens`, claiming them as
        `claims` says (see `engram.extract.runner`)."""
        return extract_pending(
            self.store, self.chat, passages, progress, max_tokens=max_tokens, ledger=self.ledger, claims=claims
        )

    @property
    def identity(self) -> str:
        """The source this session records with its extractions (model identity and prompt version)."""
        return extractor_identity(self.llm.identity)

    def redo(
        self,
        passages: Sequence[PassageRow],
        progress: Progress | None = None,
        max_tokens: int | None = None,
        fresh: bool = False,
        claims: ClaimSettings | None = None,
    ) -> ExtractionRun:
        """Extract `passages` again, finished or not. With `fresh` the response cache is not read (the model
        is asked again; its replies replace the cached ones); without, cached replies of this model count."""
        chat = CachedChat(self.llm, self.store, self.chat.hit_counter, read=False) if fresh else self.chat
        return extract_pending(
            self.store, chat, passages, progress, max_tokens=max_tokens, ledger=self.ledger, redo=True, claims=claims
        )

    def estimate(self, passages: Sequence[PassageRow]) -> ExtractionEstimate:
        return estimate_extraction(unfinished(self.store, passages), self.chat)

    def flush(self) -> None:
        self.ledger.flush()


def usage_stats(store: Store) -> dict[str, Any]:
    """The memory's LLM accounting: totals per model and over all models (`engram stats`)."""
    per_model = store.llm_usage()
    total: dict[str, int] = {}
    for counts in per_model.values():
        for key, value in counts.items():
            total[key] = total.get(key, 0) + value
    return {"total": total, "models": per_model, "cached_responses": store.counts().get("llm_cache", 0)}


def estimate_without_llm(store: Store, passages: Sequence[PassageRow]) -> ExtractionEstimate:
    """The estimate when no LLM is configured (nothing can be looked up in the cache)."""
    return estimate_extraction(unfinished(store, passages))
