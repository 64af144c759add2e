"""`OpenAIEmbedder`: embeddings from any OpenAI-compatible `/v1/embeddings` endpoint.

The official `openai` SDK's async client does the HTTP on engram's shared event loop (`engram.llm.aio`),
with its own retries off (`max_retries=0`). Batches are sent `max_concurrency` at a time, paced by optional
requests- and tokens-per-minute limits, and retried like chat calls (`engram.llm.retry`): 429, 408, 409,
5xx, timeouts and connection errors with exponential backoff and jitter, honouring `Retry-After` /
`retry-after-ms`; 400/401/403/404/422 fail at once with `LLMConfigError` (bad key, model or URL: waiting
cannot fix them). Errors use the LLM error classes because the endpoint is the same kind of service as the
chat one. The memory caches every vector by (model, role, text), so re-indexing embeds nothing twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from engram.embed._common import check_texts, empty, unique_texts
from engram.embed.base import Progress, Role, Vectors, normalize_rows
from engram.errors import InputError, LLMConfigError, LLMError

if TYPE_CHECKING:
    import openai

_PLACEHOLDER_KEY = "engram-no-key"  # local servers rarely check the key, but the SDK insists on one
_PROBE_TEXT = "dimension probe"
Matrix = np.ndarray[Any, np.dtype[np.float32]]


class OpenAIEmbedder:
    """Embeds through `POST {base_url}/embeddings` (base_url None: api.openai.com).

    Texts are de-duplicated and sent `batch_size` at a time, at most `max_concurrency` batches in flight;
    results are put back in order by their `index` and L2-normalised. Blank texts are not sent (servers reject
    them) and embed as zero rows. With `query_instruction`, role="query" texts are sent as
    `query_instruction + text` (instruction-tuned models such as E5 or GTE want e.g. "query: "); other roles
    are sent as they are.

    `dim` is the model's dimension. When None it is learned from the first response; reading `dim` or
    `identity` before any `embed` then costs one probe request. Without `api_key`, OPENAI_API_KEY is used;
    without either a placeholder key is sent, which local servers accept. Thread-safe.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 128,
        dim: int | None = None,
        query_instruction: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        max_backoff: float = 30.0,
        max_concurrency: int = 4,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
    ) -> None:
        from engram.llm.limits import RateLimiter

        if not model or not model.strip():
            raise InputError("OpenAIEmbedder needs a model name (e.g. openai:text-embedding-3-small)")
        if batch_size < 1 or max_retries < 0 or timeout <= 0 or (dim is not None and dim < 1) or max_concurrency < 1:
            raise InputError(
                "OpenAIEmbedder needs batch_size >= 1, max_retries >= 0, timeout > 0, dim >= 1, max_concurrency >= 1"
            )
        self.model = model.strip()
        self.base_url = base_url.rstrip("/") if base_url else None
        self.batch_size = batch_size
        self.query_instruction = query_instruction
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.max_concurrency = max_concurrency
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY", "").strip() or _PLACEHOLDER_KEY
        self._dim = dim
        self._client: openai.AsyncOpenAI | None = None
        self._lock = threading.Lock()
        self._slots: asyncio.Semaphore | None = None
        self._limiter = RateLimiter(requests_per_minute, tokens_per_minute)
        self._sleep: Callable[[float], object] | None = None  # None: asyncio.sleep; tests replace it

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.url!r})"

    @property
    def url(self) -> str:
        from engram.llm.failures import public_url

        return public_url(self.base_url) if self.base_url else "https://api.openai.com/v1"

    @property
    def identity(self) -> dict[str, Any]:
        return {"kind": "openai", "model": self.model, "dim": self.dim}

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._learn_dim(self._request_now([_PROBE_TEXT]).shape[1])
        assert self._dim is not None
        return self._dim

    def close(self) -> None:
        from engram.llm import aio

        if self._client is not None and not aio.in_loop_thread():
            aio.run(self._client.close())

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        items = check_texts(texts)
        if not items:
            return empty(self.dim)
        if role == "query" and self.query_instruction:
            items = [self.query_instruction + text if text.strip() else text for text in items]
        distinct, where = unique_texts(items)
        wanted = [i for i, text in enumerate(distinct) if text.strip()]
        batches = [wanted[start : start + self.batch_size] for start in range(0, len(wanted), self.batch_size)]
        rows: dict[int, Matrix] = {}
        for batch, vectors in zip(batches, self._request_all([[distinct[i] for i in b] for b in batches])):
            self._learn_dim(vectors.shape[1])
            rows.update(zip(batch, vectors))
            if progress is not None:
                progress(round(len(rows) * len(items) / max(1, len(wanted))))
        out = np.zeros((len(distinct), self.dim), dtype=np.float32)
        for i, vector in rows.items():
            out[i] = vector
        if progress is not None and not wanted:
            progress(len(items))
        return normalize_rows(out[where])

    def _learn_dim(self, width: int) -> None:
        with self._lock:
            if self._dim is None:
                self._dim = width
            elif width != self._dim:
                raise LLMConfigError(
                    f"the embedding model {self.model!r} at {self.url} returned {width}-dimensional vectors, "
                    f"expected {self._dim}"
                )

    def _get_client(self) -> openai.AsyncOpenAI:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.AsyncOpenAI(
                    api_key=self._api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0
                )
            return self._client

    def _request_now(self, batch: list[str]) -> Matrix:
        from engram.llm import aio

        return aio.run(self._request(batch))

    def _request_all(self, batches: list[list[str]]) -> Iterator[Matrix]:
        """Yield each batch's matrix in order, while up to `max_concurrency` batches are in flight."""
        from engram.llm import aio

        futures = [aio.submit(self._request(batch)) for batch in batches]
        try:
            for future in futures:
                yield future.result()
        finally:
            for future in futures:
                future.cancel()
            concurrent.futures.wait(futures, timeout=30)

    async def _request(self, batch: list[str]) -> Matrix:
        """One embeddings call (with retries): a (len(batch), d) float32 array in input order."""
        response = await self._send(batch)
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(batch) or [item.index for item in data] != list(range(len(batch))):
            raise LLMError(f"the embeddings endpoint at {self.url} answered {len(data)} vectors for {len(batch)} texts")
        try:
            matrix = np.array([item.embedding for item in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise LLMError(f"the embeddings endpoint at {self.url} sent malformed vectors: {exc}") from exc
        if matrix.ndim != 2 or matrix.shape[1] == 0:
            raise LLMError(f"the embeddings endpoint at {self.url} sent vectors of uneven or zero length")
        return matrix

    async def _send(self, batch: list[str]) -> openai.types.CreateEmbeddingResponse:
        from engram.llm.retry import RetryPolicy, with_retries, within
        from engram.tokens import estimate_tokens

        client = self._get_client()
        estimate = sum(estimate_tokens(text) for text in batch)

        async def attempt() -> openai.types.CreateEmbeddingResponse:
            await self._limiter.acquire(estimate)
            if self._slots is None:
                self._slots = asyncio.Semaphore(self.max_concurrency)
            async with self._slots:
                request = client.embeddings.create(model=self.model, input=batch, encoding_format="float")
                return await within(request, self.timeout, self.url)  # the whole request, not each read

        policy = RetryPolicy(self.max_retries, self.backoff_base, self.max_backoff)
        failures = _EmbedFailures(self.url, self.model, self.timeout)
        return await with_retries(attempt, policy, failures, sleep=self._pause)

    async def _pause(self, seconds: float) -> None:
        if self._sleep is None:
            await asyncio.sleep(seconds)
        else:
            self._sleep(seconds)


class _EmbedFailures:
    """Error messages of an embeddings endpoint (see `engram.llm.retry.FailureText`)."""

    def __init__(self, url: str, model: str, timeout: float) -> None:
        self.url, self.model, self.timeout = url, model, timeout

    def unexpected(self, error: BaseException) -> LLMError:
        return LLMError(f"embedding call to {self.url} failed: {error}")

    def exhausted(self, error: BaseException, attempts: int) -> LLMError:
        import openai

        from engram.llm.failures import server_message

        if isinstance(error, openai.APITimeoutError):
            what = f"did not answer within {self.timeout}s"
        elif isinstance(error, openai.APIConnectionError):
            what = f"could not be reached ({error}); is the server running? check ENGRAM_EMBED_BASE_URL"
        else:
            status = getattr(error, "status_code", "?")
            what = f"kept failing (HTTP {status}: {server_message(error)})"
        return LLMError(f"the embeddings endpoint at {self.url} {what}, {attempts} attempts")

    def refusal(self, error: openai.APIStatusError) -> LLMError:
        from engram.llm.failures import server_message

        status, message = error.status_code, server_message(error)
        if status == 401:
            hint = "the API key was rejected: set OPENAI_API_KEY to a valid key"
        elif status == 403:
            hint = f"access refused: check that the API key may use {self.model!r}"
        elif status == 404:
            hint = (
                f"no embeddings endpoint or no model {self.model!r} there: check ENGRAM_EMBED_BASE_URL (it must "
                "end in /v1) and the model name"
            )
        else:
            hint = f"the request was rejected: check the model name {self.model!r} and the server"
        return LLMConfigError(f"the embeddings endpoint at {self.url} answered HTTP {status}: {hint} ({message})")
