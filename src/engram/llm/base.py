"""The chat-model contract used by extraction, the recognition filter, QA and IRCoT."""

from __future__ import annotations

from typing import Protocol, TypedDict, runtime_checkable


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
