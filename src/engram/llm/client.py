"""`ChatClient`: what every engram chat client shares, whatever protocol it speaks underneath.

A subclass implements one attempt (`_attempt`); this class adds, around it, the concurrency limit (at most
`max_concurrency` requests in flight across all threads and tasks), requests- and tokens-per-minute pacing,
retries (`engram.llm.retry`), usage accounting, truncation detection and the two faces callers use:
`await acomplete(...)` on the shared event loop (`engram.llm.aio`) and the blocking `complete(...)`.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from engram.errors import LLMConfigError, LLMError
from engram.llm import aio
from engram.llm.base import Message
from engram.llm.failures import ChatFailures, LLMTruncatedError, LLMUnreachableError
from engram.llm.limits import RateLimiter
from engram.llm.retry import RetryPolicy, with_retries, within
from engram.llm.usage import LLMUsage, UsageCounter
from engram.text import valid_unicode
from engram.tokens import count_tokens, message_tokens

C = TypeVar("C", bound="ChatClient")
LOOP_WINDOW = 160  # characters: a reply whose last LOOP_WINDOW characters already occur in it repeats itself
STUCK = 3  # timeouts in a row, in units of give_up_after, after which a server that answers is taken as stuck
ResponseFormat = Literal["json_object", "json_schema", "none"]
RESPONSE_FORMATS: tuple[ResponseFormat, ...] = ("json_object", "json_schema", "none")


@dataclass(frozen=True)
class ChatRequest:
    """One request as the caller gave it. `schema` is an OpenAI `json_schema` object
    (`{"name": ..., "schema": {...}}`), used only when the client's response format is "json_schema"."""

    messages: list[Message]
    json: bool
    max_tokens: int | None
    schema: Mapping[str, Any] | None


@dataclass(frozen=True)
class ChatResult:
    """One reply: its text, why it stopped, and the token counts the server reported (None: not reported)."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def repeats_itself(text: str, window: int = LOOP_WINDOW) -> bool:
    """Whether `text` ends in a run of `window` characters it already holds earlier: a reply looping on the
    same triple or sentence (a list that names one subject many times still differs within any `window`)."""
    return len(text) >= 2 * window and text.find(text[-window:], 0, len(text) - window) >= 0


class ChatClient:
    """Base class of `OpenAIChat` and `LiteLLMChat`; see the module docstring. Thread-safe."""

    def __init__(
        self,
        model: str,
        *,
        timeout: float = 60.0,
        max_retries: int = 4,
        temperature: float = 0.0,
        seed: int | None = None,
        max_tokens: int | None = None,
        max_concurrency: int = 8,
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
        if not model:
            raise LLMConfigError("no LLM model given: set ENGRAM_LLM_MODEL to a model the server serves")
        if max_retries < 0 or max_concurrency < 1 or timeout <= 0 or give_up_after < 0 or query_max_retries < 0:
            raise LLMConfigError(
                "an LLM client needs max_retries >= 0, max_concurrency >= 1, timeout > 0, give_up_after >= 0 "
                "and query_max_retries >= 0"
            )
        if response_format not in RESPONSE_FORMATS:
            raise LLMConfigError(f"response_format must be one of {list(RESPONSE_FORMATS)}, not {response_format!r}")
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.max_concurrency = max_concurrency
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.response_format: ResponseFormat = response_format
        self.give_up_after = give_up_after
        self.query_timeout = query_timeout if query_timeout is not None else min(timeout, 15.0)
        self.query_max_retries = query_max_retries
        self.stop_loops = stop_loops
        self._limiter = RateLimiter(requests_per_minute, tokens_per_minute)
        self._slots: asyncio.Semaphore | None = None
        self._usage = UsageCounter()
        self._silent = [0]  # attempts in a row that timed out or found no server (shared with `for_queries`)

    def for_queries(self: C) -> C:
        """This client with the query-time budget (`query_timeout`, `query_max_retries`: a user waits on
        these calls), sharing its connections, limits, usage and silence count."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
        view = copy.copy(self)
        view.timeout, view.max_retries = self.query_timeout, min(self.max_retries, self.query_max_retries)
        return view

    # what subclasses provide ----------------------------------------------------------------------------
    @property
    def identity(self) -> str:
        raise NotImplementedError

    @property
    def url(self) -> str:
        raise NotImplementedError

    async def _attempt(self, request: ChatRequest) -> ChatResult:
        """Send one request (no retries); raise the SDK's exceptions unchanged."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""

    async def _alive(self) -> bool:
        """Whether the server answers a cheap request now (asked before timeouts in a row stop a run: a
        server that answers is slow on those requests, not down). False when a client cannot tell."""
        return False

    # shared behaviour -----------------------------------------------------------------------------------
    @property
    def usage(self) -> LLMUsage:
        return self._usage.snapshot()

    @property
    def cache_params(self) -> dict[str, Any]:
        """Settings that change replies: part of the response-cache key."""
        return {
            "temperature": self.temperature,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "response_format": self.response_format,
        }

    @property
    def failures(self) -> ChatFailures:
        return ChatFailures(self.url, self.model, self.timeout)

    def complete(
        self,
        messages: list[Message],
        *,
        json: bool = False,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        """Send `messages`, return the reply text. Raises `LLMError` (or a subclass) when the call fails for
        good and `LLMTruncatedError` (with the partial text) when the reply hit the token limit."""
        return aio.run(self.acomplete(messages, json=json, max_tokens=max_tokens, schema=schema))

    async def acomplete(
        self,
        messages: list[Message],
        *,
        json: bool = False,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        """`complete` as a coroutine; must run on the shared loop (`engram.llm.aio`)."""
        limit = max_tokens if max_tokens is not None else self.max_tokens
        request = ChatRequest(list(messages), json, limit, schema)
        try:
            result = await with_retries(
                lambda: self._limited(request),
                RetryPolicy(self.max_retries, self.backoff_base, self.max_backoff),
                self.failures,
                on_retry=lambda: self._usage.add(retries=1),
            )
        except LLMError:
            self._usage.add(failures=1)
            raise
        return self._finish(request, result)

    async def _limited(self, request: ChatRequest) -> ChatResult:
        estimate = 0
        if self._limiter.active:
            estimate = message_tokens(request.messages) + (request.max_tokens or 0)
            await self._limiter.acquire(estimate)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
        async with self._slots:
            result = await self._silence_checked(request)
        if self._limiter.active and result.prompt_tokens is not None:
            self._limiter.settle(estimate, result.prompt_tokens + (result.completion_tokens or 0))
        return result

    async def _silence_checked(self, request: ChatRequest) -> ChatResult:
        """One attempt, cut off `timeout` seconds after it starts however the server paces its bytes; after
        `give_up_after` attempts in a row (across all requests) that timed out or found no server, the endpoint
        is taken as down: `LLMUnreachableError`, no further retry (0: never). Timeouts from a server that
        still answers a cheap request (`_alive`) fail only their request, until `STUCK` times `give_up_after`
        in a row: a server that answers but never replies is stuck, and stops the run too."""
        import openai

        try:
            result = await within(self._attempt(request), self.timeout, self.failures.url)
        except openai.APIConnectionError as error:  # includes APITimeoutError
            self._silent[0] += 1
            if self.give_up_after and self._silent[0] >= self.give_up_after:
                slow = isinstance(error, openai.APITimeoutError) and self._silent[0] < STUCK * self.give_up_after
                if slow and await self._alive():
                    raise  # slow replies from a server that answers: this request fails alone
                raise LLMUnreachableError(
                    f"the LLM at {self.failures.url} did not answer {self._silent[0]} requests in a row "
                    f"({type(error).__name__}, timeout {self.timeout:g}s): it is taken as down and the run stops; "
                    "the replies received so far are kept (a re-run resumes from them). Check the server "
                    "(ENGRAM_LLM_BASE_URL); if it is only slow, raise "
                    "ENGRAM_LLM_TIMEOUT (ENGRAM_LLM_GIVE_UP_AFTER sets how many silent requests stop a run)"
                ) from error
            raise
        self._silent[0] = 0
        return result

    def _finish(self, request: ChatRequest, result: ChatResult) -> str:
        prompt = result.prompt_tokens
        completion = result.completion_tokens
        self._usage.add(
            calls=1,
            prompt_tokens=prompt if prompt is not None else message_tokens(request.messages),
            completion_tokens=completion if completion is not None else count_tokens(result.text),
        )
        if result.finish_reason == "length":
            raise LLMTruncatedError(
                f"the reply of {self.model} was cut off at the token limit (max_tokens={request.max_tokens})",
                valid_unicode(result.text),
            )
        return valid_unicode(result.text)  # a reply with lone surrogates could not be cached or echoed

    def response_format_for(self, request: ChatRequest) -> dict[str, Any] | None:
        """The `response_format` to send: a JSON schema when asked for and given, else a JSON object."""
        if not request.json or self.response_format == "none":
            return None
        if self.response_format == "json_schema" and request.schema is not None:
            return {"type": "json_schema", "json_schema": {"strict": True, **request.schema}}
        return {"type": "json_object"}

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
