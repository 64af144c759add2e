"""Accounting: what a chat model has done (calls, tokens, cache hits, retries, failures), in memory and in
the memory's SQLite (`llm_usage`, shown by `engram stats`)."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engram.store.base import Store

USAGE_FIELDS = ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "retries", "failures")


@dataclass(frozen=True)
class LLMUsage:
    """A snapshot of counters. `calls` counts successful completions (tokens from each reply's `usage`, or
    the offline estimate when a server sends none), `cache_hits` replies answered from the response cache,
    `retries` the extra attempts and `failures` the calls that raised."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    failures: int = 0
    cache_hits: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __sub__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __add__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class UsageCounter:
    """Thread-safe running totals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = {name: 0 for name in USAGE_FIELDS}

    def add(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._values[name] += amount

    def snapshot(self) -> LLMUsage:
        with self._lock:
            return LLMUsage(**self._values)


def usage_of(chat: object) -> LLMUsage:
    """The `usage` of a chat model that reports one (engram's clients do), else zeros."""
    value = getattr(chat, "usage", None)
    return value if isinstance(value, LLMUsage) else LLMUsage()


class UsageLedger:
    """Moves what a chat model did since the last flush into the memory's `llm_usage` table, under the
    model's identity. Flushing is cheap and idempotent; counts of two processes add up."""

    def __init__(self, store: Store, chat: object, identity: str) -> None:
        self.store = store
        self.chat = chat
        self.identity = identity
        self._lock = threading.Lock()
        self._flushed = usage_of(chat)

    def spent(self) -> LLMUsage:
        """Usage not yet flushed."""
        return usage_of(self.chat) - self._flushed

    def flush(self) -> None:
        with self._lock:
            now = usage_of(self.chat)
            delta = now - self._flushed
            if any(delta.as_dict().values()):
                self.store.add_llm_usage(self.identity, delta.as_dict())
            self._flushed = now
