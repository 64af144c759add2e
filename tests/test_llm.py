"""OpenAIChat against the scripted server, and the lenient JSON reader."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.errors import ExtractionError, LLMConfigError, LLMError
from engram.llm import (
    ChatModel,
    LLMTimeoutError,
    LLMTruncatedError,
    LLMUnreachableError,
    OpenAIChat,
    parse_json_object,
)
from engram.llm.base import Message
from fake_openai import FakeOpenAI, InFlight, error, hang, reply, unknown_model

HI: list[Message] = [{"role": "user", "content": "hi"}]


# --- parse_json_object -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  {"a": [1, 2]}\n', {"a": [1, 2]}),
        ('```json\n{"entities": ["A", "B"]}\n```', {"entities": ["A", "B"]}),
        ('Sure! Here you go:\n```\n{"a": 1}\n```\nAnything else?', {"a": 1}),
        ('The result is {"a": {"b": [1, {"c": 2}]}} as requested.', {"a": {"b": [1, {"c": 2}]}}),
        ('{"a": [1, 2, ], "b": 3, }', {"a": [1, 2], "b": 3}),
        ("{'a': 'it\\'s', 'b': 'say \"hi\"'}", {"a": "it's", "b": 'say "hi"'}),
        ("{'ok': True, 'none': None, 'no': False}", {"ok": True, "none": None, "no": False}),
        ('Use the {key} field: {"key": "x"}', {"key": "x"}),
        ('{"a": "braces } and { inside"}', {"a": "braces } and { inside"}),
        ('Here\'s the JSON: {"a": "O\'Brien"} - that\'s all', {"a": "O'Brien"}),
        ('{"a": 1} and later {"b": 2}', {"a": 1}),
        ('[{"a": 1}]', {"a": 1}),
    ],
)
def test_parse_json_object_accepts(text: str, expected: dict[str, Any]) -> None:
    assert parse_json_object(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("no json at all", "no JSON object"),
        ("[1, 2, 3]", "list"),
        ('{"triples": [["a", "b", "c"], ["d", "e', "cut off"),
        ('```json\n{"entities": ["A",', "cut off"),
        ("{not json at all}", "invalid JSON"),
    ],
)
def test_parse_json_object_rejects_with_reason(text: str, reason: str) -> None:
    with pytest.raises(ExtractionError, match=reason):
        parse_json_object(text)


def test_parse_json_object_survives_pathological_input() -> None:
    started = time.monotonic()
    for text in ["{" * 50_000, "{'" * 20_000, '{"a":' + "[" * 50_000 + "]" * 50_000 + "}", "'" * 50_000]:
        with pytest.raises(ExtractionError):
            parse_json_object(text)
    assert time.monotonic() - started < 5


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    prose=st.sampled_from(["", "Ok:\n"]),
)
def test_parse_json_object_round_trips(obj: dict[str, Any], prose: str) -> None:
    assert parse_json_object(prose + json.dumps(obj)) == obj


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="{}[]\"',:ab1 \n`\\", max_size=60))
def test_parse_json_object_only_raises_extraction_error(text: str) -> None:
    with contextlib.suppress(ExtractionError):
        assert isinstance(parse_json_object(text), dict)


# --- OpenAIChat: requests and replies ------------------------------------------------------------------


def test_complete_sends_parameters_and_counts_usage(fake_llm: FakeOpenAI) -> None:
    chat = fake_llm.chat(seed=7, temperature=0.2, max_tokens=100)
    assert isinstance(chat, ChatModel)
    assert chat.identity == "openai:fake-model"
    fake_llm.push("first answer", '{"a": 1}')
    assert chat.complete(HI) == "first answer"
    assert chat.complete(HI, json=True, max_tokens=5) == '{"a": 1}'
    plain, as_json = fake_llm.requests
    assert plain["model"] == "fake-model" and plain["seed"] == 7 and plain["temperature"] == 0.2
    assert plain["max_tokens"] == 100 and "response_format" not in plain
    assert plain["messages"] == [{"role": "user", "content": "hi"}]
    assert as_json["response_format"] == {"type": "json_object"} and as_json["max_tokens"] == 5
    usage = chat.usage
    assert (usage.calls, usage.retries, usage.failures) == (2, 0, 0)
    assert usage.prompt_tokens == 2 and usage.completion_tokens == 4  # the fake counts words


def test_truncated_reply_raises_with_the_partial_text(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(reply('{"entities": ["A"', finish_reason="length"))
    with pytest.raises(LLMTruncatedError) as caught:
        fake_llm.chat().complete(HI, json=True)
    assert caught.value.text == '{"entities": ["A"'
    assert isinstance(caught.value, LLMError)
    assert fake_llm.attempts == 1


def test_models_endpoint_lists_the_served_models(fake_llm: FakeOpenAI) -> None:
    import urllib.request

    with urllib.request.urlopen(f"{fake_llm.base_url}/models", timeout=5) as response:
        listing = json.load(response)
    assert [m["id"] for m in listing["data"]] == ["fake-model"]


# --- OpenAIChat: retries -------------------------------------------------------------------------------


def test_429_waits_for_retry_after(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(error(429, "slow down", retry_after=0.3), "ok")
    chat = fake_llm.chat()
    started = time.monotonic()
    assert chat.complete(HI) == "ok"
    assert time.monotonic() - started >= 0.28
    assert fake_llm.attempts == 2
    assert chat.usage.retries == 1


def test_retry_after_is_capped(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(error(429, retry_after=120), "ok")
    started = time.monotonic()
    assert fake_llm.chat(max_backoff=0.05).complete(HI) == "ok"
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("status", [500, 502, 503, 408])
def test_server_errors_are_retried(fake_llm: FakeOpenAI, status: int) -> None:
    fake_llm.push(error(status), error(status), "recovered")
    assert fake_llm.chat().complete(HI) == "recovered"
    assert fake_llm.attempts == 3


def test_persistent_server_errors_fail_after_the_retries(fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: error(503, "overloaded")
    chat = fake_llm.chat(max_retries=2)
    with pytest.raises(LLMError, match="503") as caught:
        chat.complete(HI)
    assert not isinstance(caught.value, LLMConfigError)
    assert fake_llm.attempts == 3
    assert chat.usage.failures == 1 and chat.usage.retries == 2


def test_timeout_is_retried(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(hang(3), "in time")
    assert fake_llm.chat(timeout=0.3).complete(HI) == "in time"
    assert fake_llm.attempts == 2


def test_persistent_timeouts_raise_timeout_error(fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = lambda request: hang(3)
    with pytest.raises(LLMTimeoutError, match=r"did not answer within 0\.2s"):
        fake_llm.chat(timeout=0.2, max_retries=1).complete(HI)
    assert fake_llm.attempts == 2


def test_unreachable_endpoint_names_the_url() -> None:
    url = "http://127.0.0.1:9/v1"  # discard port: nothing listens there
    with OpenAIChat("m", base_url=url, max_retries=2, backoff_base=0.001) as chat:
        with pytest.raises(LLMUnreachableError, match=r"127\.0\.0\.1:9/v1") as caught:
            chat.complete(HI)
        assert "ENGRAM_LLM_BASE_URL" in str(caught.value)
        assert chat.usage.retries == 2


# --- OpenAIChat: fail fast -----------------------------------------------------------------------------


def test_401_fails_fast_naming_the_key(fake_llm: FakeOpenAI) -> None:
    fake_llm.required_key = "sk-right"
    fake_llm.push("only for the right key")
    with pytest.raises(LLMConfigError, match="OPENAI_API_KEY"):
        fake_llm.chat(api_key="sk-wrong").complete(HI)
    assert fake_llm.attempts == 1
    assert fake_llm.chat(api_key="sk-right").complete(HI) == "only for the right key"


def test_unknown_model_fails_fast_naming_the_setting(fake_llm: FakeOpenAI) -> None:
    with pytest.raises(LLMConfigError, match="ENGRAM_LLM_MODEL") as caught:
        fake_llm.chat(model="no-such-model").complete(HI)
    assert "no-such-model" in str(caught.value)
    assert fake_llm.attempts == 1


def test_scripted_unknown_model_fails_fast(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(unknown_model("fake-model"))
    with pytest.raises(LLMConfigError, match="ENGRAM_LLM_MODEL"):
        fake_llm.chat().complete(HI)
    assert fake_llm.attempts == 1


def test_wrong_base_url_fails_fast_naming_v1(fake_llm: FakeOpenAI) -> None:
    root = fake_llm.base_url.removesuffix("/v1")
    with pytest.raises(LLMConfigError, match="ENGRAM_LLM_BASE_URL, which must end in /v1"):
        fake_llm.chat(base_url=root).complete(HI)
    assert fake_llm.attempts == 0  # the request never reached the chat route


def test_403_and_400_fail_fast(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(error(403, "forbidden"), error(400, "response_format is not supported"))
    chat = fake_llm.chat()
    with pytest.raises(LLMConfigError, match="403"):
        chat.complete(HI)
    with pytest.raises(LLMConfigError, match="response_format is not supported"):
        chat.complete(HI, json=True)
    assert fake_llm.attempts == 2


def test_context_overflow_is_a_request_error_not_a_config_error(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(error(400, "This model's maximum context length is 4096 tokens"))
    with pytest.raises(LLMError, match="too long") as caught:
        fake_llm.chat().complete(HI)
    assert not isinstance(caught.value, LLMConfigError)
    assert fake_llm.attempts == 1


# --- OpenAIChat: configuration -------------------------------------------------------------------------


def test_from_env(fake_llm: FakeOpenAI) -> None:
    assert OpenAIChat.from_env({}) is None
    chat = OpenAIChat.from_env({"ENGRAM_LLM_BASE_URL": fake_llm.base_url, "ENGRAM_LLM_MODEL": "fake-model"})
    assert chat is not None and chat.model == "fake-model"
    fake_llm.push("from env")
    assert chat.complete(HI) == "from env"
    chat.close()
    with pytest.raises(LLMConfigError, match="ENGRAM_LLM_MODEL"):
        OpenAIChat.from_env({"ENGRAM_LLM_BASE_URL": fake_llm.base_url})
    with pytest.raises(LLMConfigError, match="OPENAI_API_KEY"):
        OpenAIChat.from_env({"ENGRAM_LLM_MODEL": "gpt-x"})
    keyed = OpenAIChat.from_env({"ENGRAM_LLM_MODEL": "gpt-x", "OPENAI_API_KEY": "sk-test"}, timeout=3.0)
    assert keyed is not None and keyed.url == "https://api.openai.com/v1" and keyed.timeout == 3.0
    keyed.close()


def test_local_server_needs_no_key(fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake_llm.push("keyless")
    assert fake_llm.chat(api_key=None).complete(HI) == "keyless"


def test_concurrency_is_limited(fake_llm: FakeOpenAI) -> None:
    in_flight = InFlight()

    def slow(request: dict[str, Any]) -> str:
        with in_flight:
            time.sleep(0.1)
        return "done"

    fake_llm.handler = slow
    chat = fake_llm.chat(max_concurrency=2)
    threads = [threading.Thread(target=chat.complete, args=(HI,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fake_llm.attempts == 6
    assert in_flight.peak == 2
    assert chat.usage.calls == 6
