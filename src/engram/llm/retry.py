"""The retry loop shared by the chat and embedding clients (their SDK clients run with `max_retries=0`, so the
two kinds of retries never stack).

A failed attempt is retried when `engram.llm.failures` says waiting can help (429, 408, 409, 5xx, timeouts,
connection errors), after an exponential backoff with jitter, or exactly as long as the server's
`Retry-After` asks (never more than `max_backoff` seconds at once). Anything else fails at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from engram.errors import LLMError
from engram.llm.failures import retry_after, retryable_status

if TYPE_CHECKING:  # loaded by the clients that call `with_retries`, never by `import engram`
    import openai

logger = logging.getLogger(__name__)
T = TypeVar("T")


class FailureText(Protocol):
    """Turns a final failure into the `LLMError` the caller sees (see `engram.llm.failures.ChatFailures`)."""

    def unexpected(self, error: BaseException) -> LLMError: ...

    def exhausted(self, error: BaseException, attempts: int) -> LLMError: ...

    def refusal(self, error: openai.APIStatusError) -> LLMError: ...


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_retries` extra attempts; the n-th wait is drawn from [b/2, b] with
    b = min(max_backoff, backoff_base * 2**n), unless the server named a wait."""

    max_retries: int = 4
    backoff_base: float = 0.5
    max_backoff: float = 30.0

    def wait(self, attempt: int, error: BaseException) -> float:
        hinted = retry_after(error)
        if hinted is not None:
            return min(self.max_backoff, hinted)
        ceiling = min(self.max_backoff, self.backoff_base * (2.0**attempt))
        return ceiling * (0.5 + random.random() / 2)


async def within(attempt: Awaitable[T], seconds: float, url: str) -> T:
    """`await attempt`, cut off `seconds` after it starts, as the SDK's own timeout error (retried like one).

    The SDKs' timeouts bound each read of the socket, so a server that sends one byte at a time within each
    read's timeout holds a request for as long as it likes; this bounds the whole request (connect, send, read)."""
    import httpx
    import openai

    try:
        return await asyncio.wait_for(attempt, seconds)
    except asyncio.TimeoutError as exc:
        request: Any = httpx.Request("POST", url)  # kept for messages only (SDK versions name its type differently)
        raise openai.APITimeoutError(request=request) from exc


async def with_retries(
    attempt_once: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    failures: FailureText,
    *,
    on_retry: Callable[[], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """`await attempt_once()` until it succeeds, retrying what is worth retrying. Raises `LLMError`."""
    import openai

    attempt = 0
    while True:
        try:
            return await attempt_once()
        except openai.APIStatusError as error:
            if not retryable_status(error.status_code):
                raise failures.refusal(error) from error
            last: BaseException = error
        except openai.APIConnectionError as error:  # includes APITimeoutError
            last = error
        except openai.OpenAIError as error:
            raise failures.unexpected(error) from error
        except ValueError as error:  # a reply the SDK cannot decode (bytes that are not UTF-8, not JSON)
            raise failures.unexpected(error) from error
        if attempt >= policy.max_retries:
            raise failures.exhausted(last, attempt + 1) from last
        wait = policy.wait(attempt, last)
        logger.debug("attempt %d failed (%s); retrying in %.2fs", attempt + 1, last, wait)
        if on_retry is not None:
            on_retry()
        await sleep(wait)
        attempt += 1
