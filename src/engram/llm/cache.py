"""A ChatModel wrapper that answers repeated calls from the memory's SQLite response cache."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from engram.errors import ExtractionError
from engram.llm import aio
from engram.llm.base import ChatModel, Message, is_async_chat
from engram.llm.jsonparse import parse_json_object
from engram.llm.usage import LLMUsage, UsageCounter, usage_of
from engram.store.base import Store


class CachedChat:
    """Caches responses keyed by the model's identity, its reply-changing settings (`cache_params`: temperature,
    seed, default max_tokens, response format), the messages and the call's parameters. Failed calls are never
    cached, and neither are replies to JSON requests that do not parse, so a failed extraction really is
    retried. Two processes may share one cache: entries are written with `INSERT OR REPLACE`, and identical
    keys hold identical replies.

    `usage` is the wrapped model's usage plus this wrapper's `cache_hits`. With `read=False` the cache is
    written but never read (`engram extract --redo all`: the model is asked again)."""

    def __init__(
        self, inner: ChatModel, store: Store, hits: UsageCounter | None = None, *, read: bool = True
    ) -> None:
        self.inner = inner
        self.store = store
        self.read = read  # False: every call goes to the model (its reply still replaces the cached one)
        self._hits = hits if hits is not None else UsageCounter()  # shared by two views of one session

    @property
    def identity(self) -> str:
        return self.inner.identity

    @property
    def hits(self) -> int:
        return self._hits.snapshot().cache_hits

    @property
    def usage(self) -> LLMUsage:
        return usage_of(self.inner) + self._hits.snapshot()

    @property
    def hit_counter(self) -> UsageCounter:
        return self._hits

    @property
    def max_concurrency(self) -> int:
        value = getattr(self.inner, "max_concurrency", 8)
        return value if isinstance(value, int) and value > 0 else 8

    def key(
        self,
        messages: list[Message],
        json_mode: bool,
        max_tokens: int | None,
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        params = getattr(self.inner, "cache_params", None)
        payload = json.dumps(
            {
                "model": self.inner.identity,
                "params": params if isinstance(params, dict) else {},
                "messages": messages,
                "json": json_mode,
                "max_tokens": max_tokens,
                "schema": schema,
            },
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def lookup(self, messages: list[Message], *, json: bool = False, max_tokens: int | None = None) -> str | None:
        """The cached reply, if any, without calling the model or counting a hit (for estimates)."""
        return self.store.cached_response(self.key(messages, json, max_tokens))

    def complete(
        self,
        messages: list[Message],
        *,
        json: bool = False,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        key = self.key(messages, json, max_tokens, schema)
        cached = self._hit(key)
        if cached is not None:
            return cached
        if is_async_chat(self.inner):
            response = self.inner.complete(messages, json=json, max_tokens=max_tokens, schema=schema)
        else:
            response = self.inner.complete(messages, json=json, max_tokens=max_tokens)
        if self._cacheable(response, json):
            self.store.put_response(key, self.inner.identity, response)
        return response

    async def acomplete(
        self,
        messages: list[Message],
        *,
        json: bool = False,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        key = self.key(messages, json, max_tokens, schema)
        cached = self._hit(key)
        if cached is not None:
            return cached
        if is_async_chat(self.inner):
            response = await self.inner.acomplete(messages, json=json, max_tokens=max_tokens, schema=schema)
        else:
            response = await aio.to_thread(self.inner.complete, messages, json=json, max_tokens=max_tokens)
        if self._cacheable(response, json):
            await aio.to_thread(self.store.put_response, key, self.inner.identity, response)
        return response

    def _hit(self, key: str) -> str | None:
        if not self.read:
            return None
        cached = self.store.cached_response(key)
        if cached is not None:
            self._hits.add(cache_hits=1)
        return cached

    @staticmethod
    def _cacheable(response: str, json_mode: bool) -> bool:
        if not json_mode:
            return True
        try:
            parse_json_object(response)
        except ExtractionError:
            return False
        return True
