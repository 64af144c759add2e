"""`LiteLLMChat`: providers that do not speak the OpenAI protocol (Anthropic, Gemini, Bedrock, ...) through
the optional `litellm` package (`pip install "engram[litellm]"`), behind the same `ChatModel` interface.

`litellm.acompletion` does the call with its own retries off (`num_retries=0`); everything else (concurrency,
RPM/TPM pacing, retries with backoff and Retry-After, fail-fast on 4xx, accounting, truncation) is
`engram.llm.client.ChatClient`, exactly as for `OpenAIChat`: litellm's errors subclass the `openai` ones.
Credentials come from the provider's usual environment variables (ANTHROPIC_API_KEY, GEMINI_API_KEY, AWS_*).
"""

from __future__ import annotations

import importlib
from typing import Any

from engram.errors import LLMError, MissingDependencyError
from engram.llm.client import ChatClient, ChatRequest, ChatResult
from engram.llm.failures import public_url


def _litellm() -> Any:
    try:
        return importlib.import_module("litellm")
    except ImportError as error:
        raise MissingDependencyError(
            'LiteLLMChat needs the litellm package: pip install "engram[litellm]"'
        ) from error


class LiteLLMChat(ChatClient):
    """A chat model named the litellm way, e.g. "anthropic/claude-3-5-haiku-20241022",
    "gemini/gemini-2.0-flash" or "bedrock/anthropic.claude-3-haiku-20240307-v1:0". `api_key` and `base_url`
    are optional (litellm reads the provider's environment variables); other settings are `ChatClient`'s."""

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, **settings: Any) -> None:
        self._litellm = _litellm()
        super().__init__(model, **settings)
        self.base_url = base_url.rstrip("/") if base_url else None
        self._api_key = api_key

    @property
    def identity(self) -> str:
        return f"litellm:{self.model}"

    @property
    def url(self) -> str:
        return public_url(self.base_url) if self.base_url else f"litellm:{self.model.split('/', 1)[0]}"

    def __repr__(self) -> str:
        return f"LiteLLMChat(model={self.model!r})"

    async def _attempt(self, request: ChatRequest) -> ChatResult:
        options: dict[str, Any] = {"timeout": self.timeout, "num_retries": 0, "temperature": self.temperature}
        if request.max_tokens is not None:
            options["max_tokens"] = request.max_tokens
        if self.seed is not None:
            options["seed"] = self.seed
        if self.base_url is not None:
            options["api_base"] = self.base_url
        if self._api_key is not None:
            options["api_key"] = self._api_key
        response_format = self.response_format_for(request)
        if response_format is not None:
            options["response_format"] = response_format
        response = await self._litellm.acompletion(
            model=self.model, messages=[dict(m) for m in request.messages], **options
        )
        choices = getattr(response, "choices", None)
        if not choices:
            raise LLMError(f"{self.model} returned no choices")
        choice = choices[0]
        usage = getattr(response, "usage", None)
        return ChatResult(
            text=getattr(choice.message, "content", None) or "",
            finish_reason=getattr(choice, "finish_reason", None),
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
        )
