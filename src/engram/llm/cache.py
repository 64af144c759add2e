"""A ChatModel wrapper that answers repeated calls from the memory's SQLite response cache."""

from __future__ import annotations

import hashlib
import json

from engram.errors import ExtractionError
from engram.llm.base import ChatModel, Message
from engram.llm.jsonparse import parse_json_object
from engram.store.records import RecordStore


class CachedChat:
    """Caches responses keyed by model identity, messages and parameters. Failed calls are never cached, and
    neither are replies to JSON requests that do not parse, so a failed extraction really is retried."""

    def __init__(self, inner: ChatModel, store: RecordStore) -> None:
        self.inner = inner
        self.store = store
        self.hits = 0

    @property
    def identity(self) -> str:
        return self.inner.identity

    def key(self, messages: list[Message], json_mode: bool, max_tokens: int | None) -> str:
        payload = json.dumps(
            {"model": self.inner.identity, "messages": messages, "json": json_mode, "max_tokens": max_tokens},
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def complete(self, messages: list[Message], *, json: bool = False, max_tokens: int | None = None) -> str:
        key = self.key(messages, json, max_tokens)
        cached = self.store.cached_response(key)
        if cached is not None:
            self.hits += 1
            return cached
        response = self.inner.complete(messages, json=json, max_tokens=max_tokens)
        if json:
            try:
                parse_json_object(response)
            except ExtractionError:
                return response
        self.store.put_response(key, self.inner.identity, response)
        return response
