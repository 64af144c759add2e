"""Requests-per-minute and tokens-per-minute pacing: token buckets on the shared event loop.

Each bucket holds at most one second's worth of its per-minute limit (servers enforce limits over short
windows too: 600 RPM is about 10 requests a second), and refills continuously. A request takes its tokens
when the bucket holds enough (or is full, for a request larger than a second's worth); the level may then
go below zero, which makes later requests wait, so the long-run rate equals the limit exactly. After the
response, `settle` corrects the estimate to the tokens the server reported.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    def __init__(
        self,
        per_minute: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if per_minute <= 0:
            raise ValueError("a per-minute limit must be positive")
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self._clock = clock
        self._sleep = sleep
        self._stamp = clock()
        self._queue: asyncio.Lock | None = None

    def _refill(self) -> None:
        now = self._clock()
        self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    async def take(self, amount: float) -> None:
        """Wait until `amount` may be spent, then spend it (first come, first served)."""
        if self._queue is None:
            self._queue = asyncio.Lock()
        async with self._queue:
            needed = min(amount, self.capacity)
            self._refill()
            while self.level < needed:
                await self._sleep((needed - self.level) / self.rate)
                self._refill()
            self.level -= amount

    def settle(self, delta: float) -> None:
        """Spend `delta` more (or give back, when negative) once the real cost is known."""
        self._refill()
        self.level = min(self.capacity, self.level - delta)


class RateLimiter:
    """Optional RPM and TPM buckets; `None` limits cost nothing."""

    def __init__(self, requests_per_minute: float | None = None, tokens_per_minute: float | None = None) -> None:
        self.requests = TokenBucket(requests_per_minute) if requests_per_minute else None
        self.tokens = TokenBucket(tokens_per_minute) if tokens_per_minute else None

    @property
    def active(self) -> bool:
        return self.requests is not None or self.tokens is not None

    async def acquire(self, estimated_tokens: int) -> None:
        if self.requests is not None:
            await self.requests.take(1)
        if self.tokens is not None:
            await self.tokens.take(estimated_tokens)

    def settle(self, estimated_tokens: int, actual_tokens: int) -> None:
        if self.tokens is not None:
            self.tokens.settle(actual_tokens - estimated_tokens)
