"""The chat-model contract used by extraction, the recognition filter, QA and IRCoT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypedDict, TypeGuard, runtime_checkable


class Message(TypedDict):
    role: str
    content: str


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers a list of chat messages with text.

    `json` asks the server for a JSON object (OpenAI `response_format={"type": "json_object"}`); callers
    still parse and validate what comes back. Raises `engram.errors.LLMError` when the call fails for good.
    `identity` names the model for caches and the manifest.
    """

    @property
    def identity(self) -> str: ...

    def complete(
        self, messages: list[Message], *, json: bool = False, max_tokens: int | None = None
    ) -> str: ...


@runtime_checkable
class AsyncChatModel(ChatModel, Protocol):
    """A chat model that can also be awaited on engram's shared event loop (`engram.llm.aio`) and takes an
    optional JSON schema for structured output. engram's clients (`OpenAIChat`, `LiteLLMChat`) and
    `CachedChat` are; extraction then runs as many passages at once as the client's concurrency allows.
    Plain `ChatModel`s still work: their `complete` runs on a thread pool."""

    def complete(
        self,
        messages: list[Message],
        *,
        json: bool = False,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> str: ...

    async def acomplete(
        self,
        messages: list[Message],
        *,
        json: bool = False,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> str: ...


def is_async_chat(chat: object) -> TypeGuard[AsyncChatModel]:
    """Whether `chat` has `acomplete` (a cheaper test than `isinstance` with the runtime protocol)."""
    return callable(getattr(chat, "acomplete", None))
