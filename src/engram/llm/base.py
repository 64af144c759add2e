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


async def ask(chat: ChatModel, messages: list[Message], *, json: bool = False) -> str:
    """`chat`'s reply on engram's shared loop: awaited when it is async, else on a thread (`engram.llm.aio`)."""
    if is_async_chat(chat):
        return await chat.acomplete(messages, json=json)
    from engram.llm import aio

    return await aio.to_thread(chat.complete, messages, json=json)


def concurrency_of(chat: object) -> int:
    """The most requests `chat` takes at once (its `max_concurrency`, else 8)."""
    value = getattr(chat, "max_concurrency", 8)
    return value if isinstance(value, int) and value > 0 else 8
