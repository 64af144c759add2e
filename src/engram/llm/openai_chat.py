"""`OpenAIChat`: a `ChatModel` over any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama,
llama.cpp server, LM Studio...).

The official `openai` SDK's async client does the HTTP on engram's shared event loop, with its own retries
switched off (`max_retries=0`); `engram.llm.client.ChatClient` adds the concurrency limit, RPM/TPM pacing,
retries, accounting and truncation detection:

* 408, 409, 429, 5xx, timeouts and connection errors are retried with exponential backoff and jitter,
  honouring `Retry-After` / `retry-after-ms` (never waiting more than `max_backoff` seconds at once);
* 400, 401, 403, 404, 422 fail at once with `LLMConfigError` naming the fix (bad model, key, URL or response
  format), except requests too long for the model's context, which fail with a plain `LLMError`;
* an endpoint still unreachable after the retries raises `LLMUnreachableError` naming the URL; one that
  still times out raises `LLMTimeoutError`.

Truncation: when the server stops because of the token limit (`finish_reason == "length"`), `complete`
raises `LLMTruncatedError`, which carries the partial text in `.text`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from engram.errors import LLMConfigError, LLMError
from engram.llm import aio
from engram.llm.client import ChatClient, ChatRequest, ChatResult, ResponseFormat, repeats_itself
from engram.llm.failures import (
    LLMTimeoutError,
    LLMTruncatedError,
    LLMUnreachableError,
    public_url,
    retry_after,
    retryable_status,
    server_message,
)
from engram.llm.retry import within
from engram.llm.usage import LLMUsage

logger = logging.getLogger(__name__)

__all__ = ["LLMTimeoutError", "LLMTruncatedError", "LLMUnreachableError", "LLMUsage", "OpenAIChat"]

_PLACEHOLDER_KEY = "engram-no-key"
# kept for modules that imported the helpers from here
_retryable_status, _retry_after, _server_message = retryable_status, retry_after, server_message


class OpenAIChat(ChatClient):
    """Chat completions from an OpenAI-compatible server.

    `base_url` is the API root, ending in `/v1` (None: api.openai.com). Without `api_key`, OPENAI_API_KEY is
    read; a custom `base_url` then works without any key (local servers rarely check one). `temperature`
    (default 0) and `seed` are sent with every request; `max_tokens` is the default completion limit (a
    `complete` call may override it). At most `max_concurrency` requests are in flight at once, across threads
    and tasks; `requests_per_minute` and `tokens_per_minute` pace them. `response_format` is "json_object"
    (JSON requests ask for a JSON object), "json_schema" (they send the caller's schema, for servers with
    structured outputs: OpenAI, vLLM, llama.cpp, Ollama) or "none" (never send `response_format`; the reply is
    still parsed leniently). `backoff_base` and `max_backoff` shape the waits between retries (seconds).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        temperature: float = 0.0,
        seed: int | None = None,
        max_tokens: int | None = None,
        max_concurrency: int = 8,
        *,
        backoff_base: float = 0.5,
        max_backoff: float = 30.0,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        response_format: ResponseFormat = "json_object",
        give_up_after: int = 3,
        query_timeout: float | None = None,
        query_max_retries: int = 1,
        stop_loops: bool = False,
    ) -> None:
        super().__init__(
            model,
            timeout=timeout,
            max_retries=max_retries,
            temperature=temperature,
            seed=seed,
            max_tokens=max_tokens,
            max_concurrency=max_concurrency,
            backoff_base=backoff_base,
            max_backoff=max_backoff,
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            response_format=response_format,
            give_up_after=give_up_after,
            query_timeout=query_timeout,
            query_max_retries=query_max_retries,
            stop_loops=stop_loops,
        )
        self.base_url = base_url.rstrip("/") if base_url else None
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if self.base_url is None or urlparse(self.base_url).hostname == "api.openai.com":
                raise LLMConfigError(
                    "no API key for api.openai.com: set OPENAI_API_KEY, or point ENGRAM_LLM_BASE_URL at a "
                    "local OpenAI-compatible server"
                )
            key = _PLACEHOLDER_KEY
        self._client = openai.AsyncOpenAI(api_key=key, base_url=self.base_url, timeout=timeout, max_retries=0)
        self._auth = {"Authorization": f"Bearer {key}"}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> OpenAIChat | None:
        """Build from ENGRAM_LLM_BASE_URL, ENGRAM_LLM_MODEL and OPENAI_API_KEY (`environ` defaults to
        `os.environ`; `options` are passed on to the constructor).

        Returns None when neither the model nor the URL is set (no LLM configured). A URL without a model
        raises `LLMConfigError`; a model without a URL means api.openai.com.
        """
        env = os.environ if environ is None else environ
        base_url = env.get("ENGRAM_LLM_BASE_URL", "").strip() or None
        model = env.get("ENGRAM_LLM_MODEL", "").strip()
        if not model and base_url is None:
            return None
        if not model:
            raise LLMConfigError(
                f"ENGRAM_LLM_BASE_URL is set ({public_url(base_url or '')}) but ENGRAM_LLM_MODEL is not: set it "
                "to the model name the server serves (GET /v1/models lists them)"
            )
        api_key = env.get("OPENAI_API_KEY", "").strip() or None
        return cls(model, base_url=base_url, api_key=api_key, **options)

    @property
    def identity(self) -> str:
        """The model name: the same model behind another URL gives the same extractions."""
        return f"openai:{self.model}"

    @property
    def url(self) -> str:
        """The API root requests go to, without credentials (shown in error messages)."""
        return public_url(self.base_url or str(self._client.base_url).rstrip("/"))

    def close(self) -> None:
        if not aio.in_loop_thread():
            aio.run(self._client.close())

    async def _streamed(self, body: dict[str, Any]) -> ChatResult:
        """The reply read as it is generated, closed as soon as it repeats itself (`repeats_itself`): the server
        stops decoding when the stream closes, so a looping small model costs a few lines, not its whole token
        cap. A reply stopped so reads as one cut off at the limit (its complete items are salvaged)."""
        stream = await self._client.post(
            "/chat/completions",
            cast_to=ChatCompletion,
            body={**body, "stream": True},
            options={"headers": self._auth, "timeout": self.timeout},
            stream=True,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )
        text, finish = "", None
        try:
            async for chunk in stream:
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
                if finish is None and repeats_itself(text):
                    logger.debug("a reply of %s repeats itself after %d characters: stopped", self.model, len(text))
                    finish = "length"
                    break
        finally:
            await stream.close()
        return ChatResult(text=text, finish_reason=finish)

    async def _alive(self) -> bool:
        """GET /models answers within 5 s (a server busy decoding still serves it)."""
        try:
            await within(self._client.models.list(timeout=5.0), 5.0, self.url)
        except openai.OpenAIError:
            return False
        return True

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.url!r})"

    async def _attempt(self, request: ChatRequest) -> ChatResult:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in request.messages],
            "temperature": self.temperature,
        }
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        response_format = self.response_format_for(request)
        if response_format is not None:
            body["response_format"] = response_format
        if request.json and self.stop_loops:
            return await self._streamed(body)
        # `post` sends the body as it is: `chat.completions.create` first walks it against the SDK's typed
        # parameters, which costs more CPU than the rest of a call; the HTTP, auth and errors are the same
        completion = await self._client.post(
            "/chat/completions",
            cast_to=ChatCompletion,
            body=body,
            options={"headers": self._auth, "timeout": self.timeout},
        )
        if not isinstance(completion, ChatCompletion):
            raise LLMError(f"the LLM at {self.url} sent something other than a chat completion")
        if not completion.choices:
            raise LLMError(f"the LLM at {self.url} returned no choices")
        choice = completion.choices[0]
        usage = completion.usage
        return ChatResult(
            text=choice.message.content or "",
            finish_reason=choice.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )
