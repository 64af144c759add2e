"""The client layer: the shared event loop, concurrency and rate limits, the response-cache key, settings
and the optional litellm adapter (run against a stand-in module: litellm itself is not installed)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import pytest

from engram.errors import InputError, LLMConfigError, MissingDependencyError
from engram.llm import LiteLLMChat, LLMTruncatedError, OpenAIChat, aio
from engram.llm.base import Message, is_async_chat
from engram.llm.cache import CachedChat
from engram.llm.factory import llm_settings, make_chat
from engram.llm.limits import RateLimiter, TokenBucket
from engram.settings import resolve_llm
from engram.store.records import RecordStore
from fake_openai import FakeOpenAI, InFlight, Spec, error, reply, trickle

HI: list[Message] = [{"role": "user", "content": "hi"}]


# --- the shared loop -----------------------------------------------------------------------------------


def test_acomplete_runs_on_the_shared_loop_and_blocking_there_is_refused(fake_llm: FakeOpenAI) -> None:
    fake_llm.push("one", "two")
    chat = fake_llm.chat()
    assert is_async_chat(chat)

    async def both() -> tuple[str, str]:
        first = await chat.acomplete(HI)
        with pytest.raises(RuntimeError, match="await the async method"):
            chat.complete(HI)
        return first, await chat.acomplete(HI)

    assert aio.run(both()) == ("one", "two")


def test_concurrency_limit_holds_across_tasks(fake_llm: FakeOpenAI) -> None:
    in_flight = InFlight()

    def slow(request: dict[str, Any]) -> str:
        with in_flight:
            time.sleep(0.05)
        return "ok"

    fake_llm.handler = slow
    chat = fake_llm.chat(max_concurrency=3)

    async def many() -> list[str]:
        return list(await asyncio.gather(*(chat.acomplete(HI) for _ in range(12))))

    assert aio.run(many()) == ["ok"] * 12
    assert in_flight.peak == 3


# --- rate limits ---------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_token_bucket_paces_to_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(120, clock=clock, sleep=clock.sleep)  # 2 per second, a burst of 2

    async def take(n: int) -> None:
        for _ in range(n):
            await bucket.take(1)

    asyncio.run(take(10))
    assert clock.now == pytest.approx(4.0)  # 2 at once, then 8 at 2 per second


def test_token_bucket_lets_big_requests_through_and_settles() -> None:
    clock = FakeClock()
    bucket = TokenBucket(600, clock=clock, sleep=clock.sleep)  # 10 tokens per second, capacity 10
    asyncio.run(bucket.take(35))  # more than the capacity: waits for a full bucket, then goes negative
    assert clock.now == 0.0 and bucket.level == -25
    asyncio.run(bucket.take(5))
    assert clock.now == pytest.approx(3.0)
    bucket.settle(-20)  # the request cost 20 tokens less than estimated
    assert bucket.level == 10  # never above the capacity


def test_requests_per_minute_limit_paces_real_calls(fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: "ok"
    chat = fake_llm.chat(requests_per_minute=1200, max_concurrency=16)  # 20 per second

    async def many() -> None:
        await asyncio.gather(*(chat.acomplete(HI) for _ in range(30)))

    started = time.monotonic()
    aio.run(many())
    assert time.monotonic() - started >= 0.45  # 20 at once, the other 10 at 20 per second
    assert fake_llm.attempts == 30


def test_rate_limiter_without_limits_is_free() -> None:
    limiter = RateLimiter()
    assert not limiter.active and limiter.requests is None and limiter.tokens is None
    asyncio.run(limiter.acquire(10**9))  # no bucket to wait on: returns at once, whatever the size
    limiter.settle(1, 2)
    assert not limiter.active
    limited = RateLimiter(requests_per_minute=60)  # the contrast: a limit makes a bucket that paces
    assert limited.active and limited.requests is not None and limited.tokens is None


# --- replies, usage and the cache key ------------------------------------------------------------------


def test_usage_is_estimated_when_the_server_sends_none(fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    import fake_openai

    original = fake_openai._completion

    def without_usage(model: str, spec: Spec, request: dict[str, Any]) -> dict[str, Any]:
        body = original(model, spec, request)
        body.pop("usage")
        return body

    monkeypatch.setattr(fake_openai, "_completion", without_usage)
    fake_llm.push("twelve chars")
    chat = fake_llm.chat()
    chat.complete(HI)
    assert chat.usage.calls == 1 and chat.usage.prompt_tokens == 5 and chat.usage.completion_tokens == 3


def test_cache_key_covers_model_settings_and_parameters(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "db.sqlite")
    fake_llm.handler = lambda request: f"t={request['temperature']}"
    cold, warm = CachedChat(fake_llm.chat(), store), CachedChat(fake_llm.chat(temperature=0.7), store)
    assert cold.complete(HI) == "t=0.0" and cold.complete(HI) == "t=0.0"
    assert warm.complete(HI) == "t=0.7"
    assert cold.complete(HI, max_tokens=5) == "t=0.0"
    assert fake_llm.attempts == 3 and cold.hits == 1 and cold.usage.cache_hits == 1
    keys = {cold.key(HI, False, None), cold.key(HI, True, None), cold.key(HI, True, None, {"name": "x"})}
    assert len(keys) == 3
    store.close()


def test_truncated_replies_are_not_cached(fake_llm: FakeOpenAI, tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "db.sqlite")
    fake_llm.push(reply("partial", finish_reason="length"), "whole")
    chat = CachedChat(fake_llm.chat(), store)
    with pytest.raises(LLMTruncatedError):
        chat.complete(HI)
    assert chat.complete(HI) == "whole" and chat.complete(HI) == "whole"
    assert fake_llm.attempts == 2
    store.close()


# --- settings ------------------------------------------------------------------------------------------


def test_settings_precedence_and_validation() -> None:
    env = {"ENGRAM_LLM_MODEL": "env-model", "ENGRAM_LLM_CONCURRENCY": "12", "ENGRAM_LLM_RPM": "600"}
    section = {"model": "file-model", "max_concurrency": 4, "timeout": 9, "seed": 3, "response_format": "none"}
    merged = llm_settings(section, env, model=None, max_concurrency=None)
    assert merged["model"] == "env-model" and merged["max_concurrency"] == 12 and merged["timeout"] == 9
    assert merged["requests_per_minute"] == 600.0 and merged["seed"] == 3
    assert llm_settings(section, env, max_concurrency=2)["max_concurrency"] == 2
    with pytest.raises(InputError, match="known"):
        llm_settings({"modle": "x"}, {})
    with pytest.raises(InputError, match="ENGRAM_LLM_TIMEOUT"):
        llm_settings({}, {"ENGRAM_LLM_TIMEOUT": "soon"})
    assert make_chat(llm_settings({}, {})) is None
    with pytest.raises(InputError, match="provider"):
        make_chat({"model": "m", "provider": "carrier-pigeon"})


def test_resolve_llm_reads_every_setting_from_config_json(
    fake_llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_TRUST_MEMORY_CONFIG", "1")  # a memory's endpoint is used only when trusted
    section = {
        "base_url": fake_llm.base_url,
        "model": "fake-model",
        "max_concurrency": 3,
        "temperature": 0.5,
        "tokens_per_minute": 100000,
        "max_tokens": 64,
        "response_format": "json_schema",
    }
    (tmp_path / "config.json").write_text(json.dumps({"llm": section}))
    chat = resolve_llm(tmp_path)
    assert isinstance(chat, OpenAIChat)
    assert (chat.max_concurrency, chat.temperature, chat.max_tokens) == (3, 0.5, 64)
    assert chat.response_format == "json_schema"
    fake_llm.push("configured")
    assert chat.complete(HI) == "configured"
    assert fake_llm.requests[0]["max_tokens"] == 64 and fake_llm.requests[0]["temperature"] == 0.5
    chat.close()
    with pytest.raises(LLMConfigError, match="response_format"):
        OpenAIChat("m", base_url=fake_llm.base_url, response_format="yaml")  # type: ignore[arg-type]


# --- litellm -------------------------------------------------------------------------------------------


def test_litellm_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)
    with pytest.raises(MissingDependencyError, match=r"engram\[litellm\]"):
        LiteLLMChat("anthropic/claude-3-5-haiku-20241022")
    with pytest.raises(MissingDependencyError):
        make_chat({"model": "gemini/gemini-2.0-flash", "provider": "litellm"})


def fake_litellm(script: list[Any]) -> tuple[types.ModuleType, list[dict[str, Any]]]:
    """A stand-in `litellm` module whose `acompletion` plays `script` (replies or exceptions)."""
    calls: list[dict[str, Any]] = []

    async def acompletion(**kwargs: Any) -> Any:
        calls.append(kwargs)
        item = script.pop(0)
        if isinstance(item, BaseException):
            raise item
        text, finish = item
        message = types.SimpleNamespace(content=text)
        usage = types.SimpleNamespace(prompt_tokens=7, completion_tokens=2)
        choice = types.SimpleNamespace(message=message, finish_reason=finish)
        return types.SimpleNamespace(choices=[choice], usage=usage)

    module = types.ModuleType("litellm")
    module.acompletion = acompletion  # type: ignore[attr-defined]
    return module, calls


def rate_limited() -> openai.RateLimitError:
    request = httpx.Request("POST", "https://api.anthropic.com/v1/messages")
    response = httpx.Response(429, headers={"retry-after": "0"}, request=request)
    return openai.RateLimitError("slow down", response=response, body=None)


def test_litellm_adapter_retries_accounts_and_detects_truncation(monkeypatch: pytest.MonkeyPatch) -> None:
    module, calls = fake_litellm([rate_limited(), ('{"a": 1}', "stop"), ("cut", "length")])
    monkeypatch.setitem(sys.modules, "litellm", module)
    chat = LiteLLMChat("anthropic/claude-3-5-haiku-20241022", seed=5, max_tokens=100, backoff_base=0.001)
    assert chat.identity == "litellm:anthropic/claude-3-5-haiku-20241022"
    assert chat.complete(HI, json=True) == '{"a": 1}'
    with pytest.raises(LLMTruncatedError):
        chat.complete(HI)
    assert len(calls) == 3 and all(c["num_retries"] == 0 for c in calls)
    assert calls[1]["response_format"] == {"type": "json_object"} and calls[1]["seed"] == 5
    usage = chat.usage
    assert (usage.calls, usage.retries, usage.prompt_tokens, usage.completion_tokens) == (2, 1, 14, 4)


def test_litellm_adapter_fails_fast_on_a_bad_key(monkeypatch: pytest.MonkeyPatch) -> None:
    request = httpx.Request("POST", "https://api.anthropic.com/v1/messages")
    denied = openai.AuthenticationError("bad key", response=httpx.Response(401, request=request), body=None)
    module, calls = fake_litellm([denied, ("never", "stop")])
    monkeypatch.setitem(sys.modules, "litellm", module)
    with pytest.raises(LLMConfigError, match="API key"):
        LiteLLMChat("anthropic/claude-3-5-haiku-20241022").complete(HI)
    assert len(calls) == 1


def test_server_errors_count_against_the_retry_bound(fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: error(500)
    chat = fake_llm.chat(max_retries=3)
    with pytest.raises(Exception, match="HTTP 500"):
        chat.complete(HI)
    assert fake_llm.attempts == 4 and chat.usage.retries == 3 and chat.usage.failures == 1


# --- embeddings ----------------------------------------------------------------------------------------


def test_embedding_batches_run_concurrently_and_keep_their_order() -> None:
    import numpy as np

    from engram.embed import OpenAIEmbedder, make_embedder
    from test_embed import EmbeddingServer, fake_vector

    server = EmbeddingServer()
    try:
        embedder = OpenAIEmbedder("fake-embed", base_url=server.url, batch_size=3, max_concurrency=4)
        texts = [f"text number {i}" for i in range(31)]
        vectors = embedder.embed(texts)
        assert len(server.requests) == 11
        for row, text in zip(vectors, texts):
            expected = np.array(fake_vector(text), dtype=np.float32)
            assert np.allclose(row, expected / np.linalg.norm(expected), atol=1e-6)
        embedder.close()
    finally:
        server.close()
    env = {"ENGRAM_EMBED_BASE_URL": server.url, "ENGRAM_EMBED_CONCURRENCY": "7"}
    made = make_embedder("openai:fake-embed", env)
    assert isinstance(made, OpenAIEmbedder) and made.max_concurrency == 7
    with pytest.raises(InputError, match="ENGRAM_EMBED_CONCURRENCY"):
        make_embedder("openai:fake-embed", {"ENGRAM_EMBED_CONCURRENCY": "many"})


def test_a_streamed_reply_that_repeats_itself_is_stopped_and_read_as_cut_off(fake_llm: FakeOpenAI) -> None:
    """A small model looping on one triple: with stop_loops the reply is streamed and closed once its end repeats
    what it already said, long before the server's cap; the complete triples before that are salvaged."""
    from engram.extract.openie import extract_passage
    from engram.llm.client import LOOP_WINDOW, repeats_itself

    loop = '["Nora Vale", "was the producer of the Harbour Festival in 2006", "Harbour Festival"], '
    looping = '{"triples": [["Nora Vale", "was born in", "1951"], ' + loop * 200
    fake_llm.push('{"entities": ["Nora Vale", "Harbour Festival", "1951"]}', trickle(0.002, looping))
    chat = fake_llm.chat(stop_loops=True)
    start = time.monotonic()
    outcome = extract_passage(chat, "Nora Vale (born 1951) produced the Harbour Festival of 2006.", "Nora Vale")
    assert time.monotonic() - start < 5  # the whole reply would take 2,000+ events x 2 ms
    assert outcome.ok and ("Nora Vale", "was born in", "1951") in outcome.triples
    assert fake_llm.attempts == 2  # read as cut off and salvaged, not asked again
    assert all(request.get("stream") is True for request in fake_llm.requests)
    assert fake_llm.events_sent[-1] * 8 < 4 * LOOP_WINDOW + len(loop)  # stopped within a few loops
    legit = json.dumps({"triples": [["Journal of Harbour Studies", relation, obj] for relation, obj in [
        ("is published by", "Kestrel Press"), ("is published on behalf of", "Harbour Society"),
        ("was established in", "1991"), ("is edited by", "Morwen Pryce"), ("covers", "maritime history"),
        ("is published", "quarterly"), ("is indexed in", "Scopus"), ("has an impact factor of", "1.2")]]})
    assert len(legit) > 3 * LOOP_WINDOW and not repeats_itself(legit)
    assert repeats_itself(looping[: len(looping) // 2])


def test_without_stop_loops_replies_are_not_streamed(fake_llm: FakeOpenAI) -> None:
    fake_llm.push('{"entities": []}')
    fake_llm.chat().complete([{"role": "user", "content": "x"}], json=True)
    assert "stream" not in fake_llm.requests[-1]
