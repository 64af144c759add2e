"""`OpenAIChat`: a `ChatModel` over any OpenAI-compatible chat-completions endpoint.

The official `openai` SDK does the HTTP; its own retries are switched off (`max_retries=0`) and replaced by
the loop here, which knows which failures are worth waiting for:

* 408, 409, 429, 5xx, timeouts and connection errors are retried with exponential backoff and jitter,
  honouring `Retry-After` / `retry-after-ms` (never waiting more than `max_backoff` seconds at once);
* 400, 401, 403, 404, 422 fail at once with `LLMConfigError` naming the fix (bad model, key or URL),
  except requests too long for the model's context, which fail with a plain `LLMError` (only that
  request is at fault, not the configuration);
* an endpoint still unreachable after the retries raises `LLMUnreachableError` naming the URL; one that
  still times out raises `LLMTimeoutError`.

Truncation: when the server stops because of the token limit (`finish_reason == "length"`), `complete`
raises `LLMTruncatedError`, which carries the partial text in `.text`. A cut-off answer is never passed off
as a complete one; callers that can use a partial text (the QA reader) catch it and read `.text`.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import openai
from openai.types.chat import ChatCompletion

from engram.errors import LLMConfigError, LLMError
from engram.llm.base import Message

logger = logging.getLogger(__name__)

_PLACEHOLDER_KEY = "engram-no-key"
_RETRY_STATUSES = frozenset({408, 409, 429})
_CONTEXT_HINTS = ("context length", "context window", "maximum context", "too many tokens", "too long")
_MODEL_MISSING_HINTS = (
    "does not exist",
    "not found",
    "not_found",
    "unknown model",
    "no such model",
    "not available",
)


class LLMTruncatedError(LLMError):
    """The model stopped at the token limit; `text` holds what it wrote before it was cut off."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text


class LLMUnreachableError(LLMError):
    """The endpoint could not be reached: the connection failed on every attempt (the server is down or the
    URL is wrong). Batch callers should stop rather than fail every remaining item the same way."""


class LLMTimeoutError(LLMError):
    """The endpoint accepted the request but did not answer in time, on every attempt. This may be the one
    request (a huge prompt) rather than the server, so batch callers treat it as that item's failure."""


@dataclass(frozen=True)
class LLMUsage:
    """A snapshot of what an `OpenAIChat` has done so far.

    `calls` counts successful completions, `retries` the extra attempts, `failures` the calls that raised.
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    failures: int = 0


class _UsageCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "retries": 0, "failures": 0}

    def add(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._values[name] += amount

    def snapshot(self) -> LLMUsage:
        with self._lock:
            return LLMUsage(**self._values)


class OpenAIChat:
    """Chat completions from an OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp, LM Studio...).

    `base_url` is the API root, ending in `/v1` (None: api.openai.com). Without `api_key`, OPENAI_API_KEY is
    read; a custom `base_url` then works without any key (local servers rarely check one). `seed` and
    `temperature` are sent with every request, `max_tokens` is the default completion limit (a `complete`
    call may override it). At most `max_concurrency` requests are in flight at once across threads; the
    object is thread-safe. `backoff_base` and `max_backoff` shape the waits between retries (seconds).
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
    ) -> None:
        if not model:
            raise LLMConfigError("no LLM model given: set ENGRAM_LLM_MODEL to a model the server serves")
        if max_retries < 0 or max_concurrency < 1 or timeout <= 0:
            raise LLMConfigError("OpenAIChat needs max_retries >= 0, max_concurrency >= 1 and timeout > 0")
        self.model = model
        self.base_url = base_url.rstrip("/") if base_url else None
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if self.base_url is None or urlparse(self.base_url).hostname == "api.openai.com":
                raise LLMConfigError(
                    "no API key for api.openai.com: set OPENAI_API_KEY, or point ENGRAM_LLM_BASE_URL at a "
                    "local OpenAI-compatible server"
                )
            key = _PLACEHOLDER_KEY
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, timeout=timeout, max_retries=0)
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._usage = _UsageCounter()

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
                f"ENGRAM_LLM_BASE_URL is set ({base_url}) but ENGRAM_LLM_MODEL is not: set it to the model "
                "name the server serves (GET /v1/models lists them)"
            )
        api_key = env.get("OPENAI_API_KEY", "").strip() or None
        return cls(model, base_url=base_url, api_key=api_key, **options)

    @property
    def identity(self) -> str:
        """The model name: the same model behind another URL gives the same extractions."""
        return f"openai:{self.model}"

    @property
    def usage(self) -> LLMUsage:
        return self._usage.snapshot()

    @property
    def url(self) -> str:
        """The API root requests go to (shown in error messages)."""
        return self.base_url or str(self._client.base_url).rstrip("/")

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIChat:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.url!r})"

    def complete(self, messages: list[Message], *, json: bool = False, max_tokens: int | None = None) -> str:
        """Send `messages`, return the reply text. Raises `LLMError` (or a subclass) when the call fails."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": self.temperature,
        }
        limit = max_tokens if max_tokens is not None else self.max_tokens
        if limit is not None:
            request["max_tokens"] = limit
        if self.seed is not None:
            request["seed"] = self.seed
        if json:
            request["response_format"] = {"type": "json_object"}
        try:
            completion = self._send(request)
        except LLMError:
            self._usage.add(failures=1)
            raise
        return self._read(completion, limit)

    def _send(self, request: dict[str, Any]) -> ChatCompletion:
        attempt = 0
        while True:
            try:
                with self._slots:
                    response = self._client.chat.completions.create(**request)
                if not isinstance(response, ChatCompletion):
                    raise LLMError(f"the LLM at {self.url} sent something other than a chat completion")
                return response
            except openai.APIStatusError as error:
                if not _retryable_status(error.status_code):
                    raise self._refusal(error) from error
                last: openai.OpenAIError = error
            except openai.APIConnectionError as error:
                last = error
            except openai.OpenAIError as error:
                raise LLMError(f"LLM call to {self.url} failed: {error}") from error
            if attempt >= self.max_retries:
                raise self._exhausted(last, attempt + 1) from last
            wait = self._backoff(attempt, last)
            logger.debug("LLM attempt %d failed (%s); retrying in %.2fs", attempt + 1, last, wait)
            self._usage.add(retries=1)
            time.sleep(wait)
            attempt += 1

    def _read(self, completion: ChatCompletion, limit: int | None) -> str:
        if not completion.choices:
            self._usage.add(failures=1)
            raise LLMError(f"LLM at {self.url} returned no choices")
        choice = completion.choices[0]
        text = choice.message.content or ""
        usage = completion.usage
        self._usage.add(
            calls=1,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
        )
        if choice.finish_reason == "length":
            raise LLMTruncatedError(
                f"the reply of {self.model} was cut off at the token limit (max_tokens={limit})", text
            )
        return text

    def _backoff(self, attempt: int, error: openai.OpenAIError) -> float:
        hinted = _retry_after(error)
        if hinted is not None:
            return min(self.max_backoff, hinted)
        ceiling = min(self.max_backoff, self.backoff_base * (2.0**attempt))
        return ceiling * (0.5 + random.random() / 2)

    def _exhausted(self, error: openai.OpenAIError, attempts: int) -> LLMError:
        if isinstance(error, openai.APITimeoutError):
            return LLMTimeoutError(
                f"the LLM at {self.url} did not answer within {self.timeout}s ({attempts} attempts); "
                "is the server overloaded? raise the timeout or check ENGRAM_LLM_BASE_URL"
            )
        if isinstance(error, openai.APIConnectionError):
            return LLMUnreachableError(
                f"cannot reach the LLM at {self.url} ({attempts} attempts: {error}); is the server running? "
                "check ENGRAM_LLM_BASE_URL"
            )
        status = error.status_code if isinstance(error, openai.APIStatusError) else "?"
        return LLMError(
            f"the LLM at {self.url} kept failing (HTTP {status} on {attempts} attempts): "
            f"{_server_message(error)}"
        )

    def _refusal(self, error: openai.APIStatusError) -> LLMError:
        status, message = error.status_code, _server_message(error)
        lowered = f"{message} {error.code or ''}".lower()
        model_missing = "model" in lowered and any(h in lowered for h in _MODEL_MISSING_HINTS)
        if status == 401:
            return LLMConfigError(
                f"the LLM at {self.url} rejected the API key (HTTP 401): set OPENAI_API_KEY to a valid key "
                f"({message})"
            )
        if model_missing and status in (400, 403, 404, 422):
            return LLMConfigError(
                f"the LLM at {self.url} does not serve the model {self.model!r} (HTTP {status}): check "
                f"ENGRAM_LLM_MODEL ({message})"
            )
        if status == 403:
            return LLMConfigError(
                f"the LLM at {self.url} refused access (HTTP 403): check that OPENAI_API_KEY may use "
                f"{self.model!r} ({message})"
            )
        if status == 404:
            return LLMConfigError(
                f"no chat-completions endpoint at {self.url}/chat/completions (HTTP 404): check "
                f"ENGRAM_LLM_BASE_URL, which must end in /v1 ({message})"
            )
        if status == 413 or (status in (400, 422) and any(h in lowered for h in _CONTEXT_HINTS)):
            return LLMError(f"the request is too long for {self.model!r} (HTTP {status}): {message}")
        return LLMConfigError(f"the LLM at {self.url} rejected the request (HTTP {status}): {message}")


def _retryable_status(status: int) -> bool:
    return status in _RETRY_STATUSES or status >= 500


def _server_message(error: openai.OpenAIError) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:300]
    return str(error)[:300]


def _retry_after(error: openai.OpenAIError) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, or `Retry-After` as seconds or a date)."""
    if not isinstance(error, openai.APIStatusError):
        return None
    headers = error.response.headers
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())
