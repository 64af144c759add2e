"""How LLM calls fail: the error classes, which failures are worth retrying, and messages that name the fix.

* 408, 409, 429 and 5xx, timeouts and connection errors are retried (see `engram.llm.retry`);
* 400, 401, 403, 404, 422 are not: `ChatFailures.refusal` turns them into `LLMConfigError` naming the setting
  to change (model, key, URL, response format), except a request too long for the model's context, which is
  a plain `LLMError` (only that request is at fault);
* after the last retry, `ChatFailures.exhausted` gives `LLMTimeoutError`, `LLMUnreachableError` or `LLMError`.

Errors of `litellm` subclass the `openai` ones, so the same rules cover both clients.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from engram.errors import LLMConfigError, LLMError

if TYPE_CHECKING:  # the SDK is imported by the client that raises its errors, never by `import engram`
    import openai

_RETRY_STATUSES = frozenset({408, 409, 429})
_CONTEXT_HINTS = ("context length", "context window", "maximum context", "too many tokens", "too long")
_FORMAT_HINTS = ("response_format", "json_schema", "json_object", "structured output", "guided")
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


def public_url(url: str) -> str:
    """`url` fit to show: without credentials written into it (`http://user:pass@host` gives
    `http://host`) and without its query string (some gateways take keys there)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unparsable URL)"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def retryable_status(status: int) -> bool:
    return status in _RETRY_STATUSES or status >= 500


def server_message(error: BaseException) -> str:
    """The server's own error message, else the exception text (at most 300 characters)."""
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:300]
    return str(error)[:300]


def retry_after(error: BaseException) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, or `Retry-After` as seconds or an HTTP date)."""
    import openai

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


@dataclass(frozen=True)
class ChatFailures:
    """Error messages of one chat endpoint. `env` prefixes the environment variables the hints name."""

    url: str
    model: str
    timeout: float
    env: str = "ENGRAM_LLM"

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", public_url(self.url))

    def unexpected(self, error: BaseException) -> LLMError:
        return LLMError(f"LLM call to {self.url} failed: {error}")

    def exhausted(self, error: BaseException, attempts: int) -> LLMError:
        import openai

        if isinstance(error, openai.APITimeoutError):
            return LLMTimeoutError(
                f"the LLM at {self.url} did not answer within {self.timeout}s ({attempts} attempts); "
                f"is the server overloaded? raise the timeout ({self.env}_TIMEOUT) or check {self.env}_BASE_URL"
            )
        if isinstance(error, openai.APIConnectionError):
            return LLMUnreachableError(
                f"cannot reach the LLM at {self.url} ({attempts} attempts: {error}); is the server running? "
                f"check {self.env}_BASE_URL"
            )
        status = getattr(error, "status_code", "?")
        return LLMError(
            f"the LLM at {self.url} kept failing (HTTP {status} on {attempts} attempts): {server_message(error)}"
        )

    def refusal(self, error: openai.APIStatusError) -> LLMError:
        status, message = error.status_code, server_message(error)
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
                f"{self.env}_MODEL ({message})"
            )
        if status == 403:
            return LLMConfigError(
                f"the LLM at {self.url} refused access (HTTP 403): check that OPENAI_API_KEY may use "
                f"{self.model!r} ({message})"
            )
        if status == 404:
            return LLMConfigError(
                f"no chat-completions endpoint at {self.url}/chat/completions (HTTP {status}): check "
                f"{self.env}_BASE_URL, which must end in /v1 ({message})"
            )
        if status == 413 or (status in (400, 422) and any(h in lowered for h in _CONTEXT_HINTS)):
            return LLMError(
                f"the request is too long for {self.model!r} (HTTP {status}): lower --max-input-tokens so "
                f"documents are chunked smaller ({message})"
            )
        if status in (400, 422) and any(h in lowered for h in _FORMAT_HINTS):
            return LLMConfigError(
                f"the LLM at {self.url} rejected the requested JSON output format (HTTP {status}): set "
                f'{self.env}_RESPONSE_FORMAT to "json_object" or "none" ({message})'
            )
        return LLMConfigError(f"the LLM at {self.url} rejected the request (HTTP {status}): {message}")
