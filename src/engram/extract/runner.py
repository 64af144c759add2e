"""Extracting a memory's unfinished passages: cached, committed one passage at a time, within a token budget.

Every reply goes through the memory's response cache (`CachedChat`) and every finished passage is committed
at once, so after a crash or a stop a re-run sends requests only for passages that were not finished (and
not even those of their requests whose replies were cached). With `max_tokens`, no passage starts once the
tokens spent in this run (prompt + completion, as the server reported them) reach the budget; passages in
flight still finish, so the run may end above the budget by at most what they cost.

Passages are claimed from the store as they start (`engram.extract.claims`): several runs on one memory, in any
processes, share the work and never send one passage twice. With `ClaimSettings.wait` a run that finds the
rest held by other workers waits for them to finish, or for their leases to lapse and takes those over.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from engram.extract.claims import ClaimFeed, ClaimSettings, Heartbeat
from engram.extract.openie import ExtractionOutcome, extract_many, extractor_identity
from engram.llm.base import ChatModel
from engram.llm.cache import CachedChat
from engram.llm.usage import LLMUsage, UsageLedger, usage_of
from engram.store.base import Store
from engram.store.rows import PassageRow
from engram.types import Progress

FLUSH_SECONDS = 1.0


@dataclass
class ExtractionRun:
    """What one run did: passages extracted and failed, whether the token budget stopped it (then
    `remaining` passages were not started), and the LLM usage of the run. `by_others`: passages other workers
    extracted (or failed) first; `held`: passages left to other workers that still held them (a run that does
    not wait)."""

    done: int = 0
    failed: int = 0
    remaining: int = 0
    budget_reached: bool = False
    usage: LLMUsage = field(default_factory=LLMUsage)
    by_others: int = 0
    held: int = 0


def window_for(chat: ChatModel) -> int:
    """Passages in flight: the client's concurrency plus some slack, so a passage between its two requests
    (parsing, caching) never leaves a connection idle."""
    value = getattr(chat, "max_concurrency", 8)
    concurrency = value if isinstance(value, int) and value > 0 else 8
    return concurrency + max(2, concurrency // 4)


def unfinished(store: Store, passages: Sequence[PassageRow]) -> list[PassageRow]:
    """The passages without a finished extraction (pending or failed), each content once."""
    rows = store.extractions_for([p.content_hash for p in passages])
    seen: set[str] = set()
    out = []
    for p in passages:
        row = rows.get(p.content_hash)
        if (row is None or row.status != "done") and p.content_hash not in seen:
            seen.add(p.content_hash)
            out.append(p)
    return out


def extract_pending(
    store: Store,
    chat: ChatModel,
    passages: Sequence[PassageRow],
    progress: Progress | None = None,
    *,
    max_tokens: int | None = None,
    ledger: UsageLedger | None = None,
    redo: bool = False,
    claims: ClaimSettings | None = None,
) -> ExtractionRun:
    """Extract the passages of `passages` that have no finished extraction (with `redo`: all of them, each
    content once; a passage whose re-extraction fails keeps its finished extraction). `chat` is wrapped in a
    `CachedChat` on `store` unless it is one already. `ledger` (if given) is flushed as results arrive. Results
    are recorded under `extractor_identity(chat.identity)`. Passages are claimed as they start (`claims`,
    default `ClaimSettings.from_environment()`: no waiting for other workers)."""
    cached = chat if isinstance(chat, CachedChat) else CachedChat(chat, store)
    todo = list({p.content_hash: p for p in passages}.values())
    earlier = store.extractions_for([p.content_hash for p in todo])
    if not redo:
        todo = [p for p in todo if p.content_hash not in earlier or earlier[p.content_hash].status != "done"]
    keep = {digest for digest, row in earlier.items() if redo and row.status == "done"}  # a failed redo keeps these
    by_id = {p.id: p for p in todo}
    source = extractor_identity(cached.identity)
    run = ExtractionRun()
    start = usage_of(cached)
    last_flush = time.monotonic()
    settings = claims if claims is not None else ClaimSettings.from_environment()
    seen = {digest: row.attempts for digest, row in earlier.items()}
    feed = ClaimFeed(store, todo, seen, settings, window_for(cached))

    def over_budget() -> bool:
        return max_tokens is not None and (usage_of(cached) - start).tokens >= max_tokens

    def on_result(passage_id: str, outcome: ExtractionOutcome) -> None:
        nonlocal last_flush
        digest = by_id[passage_id].content_hash
        if outcome.error:
            if digest not in keep:
                store.put_failure(digest, outcome.error, source, claim=feed.worker)
            run.failed += 1
        else:
            row = (digest, outcome.entities, outcome.triples, outcome.dropped)
            store.put_extractions([row], source, claim=feed.worker)
            run.done += 1
        feed.finished(digest)
        if ledger is not None and time.monotonic() - last_flush >= FLUSH_SECONDS:
            ledger.flush()
            last_flush = time.monotonic()
        if progress:
            progress("extract", run.done + run.failed + feed.gone, len(todo))

    try:
        with Heartbeat(feed):
            while todo and not over_budget():
                extract_many(cached, feed, max_workers=window_for(cached), on_result=on_result, should_stop=over_budget)
                if over_budget() or not settings.wait or not feed.others_pending():
                    break
                time.sleep(feed.next_round())  # others hold the rest: wait until they finish or their leases lapse
    finally:
        unstarted, run.held, run.by_others = feed.unstarted() - len(feed.held), len(feed.held), feed.gone
        try:
            feed.release()
        finally:
            if ledger is not None:
                ledger.flush()
    run.remaining = unstarted if over_budget() else 0
    run.budget_reached = run.remaining > 0
    run.usage = usage_of(cached) - start
    return run
