"""Where the LLM comes from (issue 10, defects 3 and 8): one resolution for the library and the CLI, half
configurations refused, endpoints and key variables never taken from an untrusted memory's config.json, the
SQLite file private, and credentials in a base URL never echoed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from engram import Memory
from engram.cli import main
from engram.embed import HashEmbedder
from engram.errors import LLMConfigError, LLMError
from engram.llm.openai_chat import OpenAIChat
from engram.settings import resolve_llm
from fake_openai import DEFAULT_MODEL, FakeOpenAI, Spec, reply, task_of
from helpers import DOCS, EXTRACTIONS

LLM_VARIABLES = (
    "ENGRAM_LLM_BASE_URL",
    "ENGRAM_LLM_MODEL",
    "ENGRAM_LLM_PROVIDER",
    "ENGRAM_TRUST_MEMORY_CONFIG",
    "ENGRAM_EMBEDDER",
    "OPENAI_API_KEY",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in LLM_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user-config"))  # no user config file


def reader_handler(request: dict[str, Any]) -> Spec | None:
    if task_of(request) == "reader":
        return reply("It says so.\nAnswer: Lyon")
    if task_of(request) == "filter":
        return reply(json.dumps({"facts": []}))
    return None


def test_library_memory_reads_the_llm_from_the_environment(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_LLM_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("ENGRAM_LLM_MODEL", DEFAULT_MODEL)
    fake_llm.handler = reader_handler
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        assert memory.llm is not None
        answers = memory.answer("Where was Alice Moreau born?")
    assert answers[0].answer == "Lyon"
    assert fake_llm.attempts >= 1
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        assert memory.llm is None
        with pytest.raises(LLMError):
            memory.answer("Where was Alice Moreau born?")


def test_a_base_url_without_a_model_is_an_error_naming_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENGRAM_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(LLMConfigError, match="ENGRAM_LLM_MODEL"):
        resolve_llm(None)
    with pytest.raises(LLMConfigError, match="ENGRAM_LLM_MODEL"):
        Memory(tmp_path / "m", embedder=HashEmbedder())
    (tmp_path / "doc.txt").write_text("Alice Moreau founded Acme Tools.")
    assert main(["index", str(tmp_path / "doc.txt"), "--memory", str(tmp_path / "m2"), "--embedder", "hash"]) == 1
    assert "ENGRAM_LLM_MODEL" in capsys.readouterr().err


def test_a_model_in_the_memory_config_without_a_url_names_the_missing_url(tmp_path: Path) -> None:
    memory_dir = tmp_path / "m"
    memory_dir.mkdir()
    (memory_dir / "config.json").write_text(json.dumps({"llm": {"model": "qwen-local"}}))
    # no OPENAI_API_KEY: a model alone means api.openai.com, which needs a key: the error names both fixes
    with pytest.raises(LLMConfigError, match="ENGRAM_LLM_BASE_URL"):
        resolve_llm(memory_dir)


def untrusted_memory(tmp_path: Path, base_url: str) -> Path:
    """A memory someone else made, whose config.json points the LLM at their server with our secret."""
    path = tmp_path / "untrusted"
    with Memory(path, embedder=HashEmbedder(), llm=False) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
    llm = {"base_url": base_url, "model": DEFAULT_MODEL, "api_key_env": "AWS_SECRET_ACCESS_KEY"}
    (path / "config.json").write_text(json.dumps({"llm": llm}))
    return path


def test_an_untrusted_memory_config_never_picks_the_endpoint_or_the_key(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret-aws-key")
    fake_llm.handler = reader_handler
    path = untrusted_memory(tmp_path, fake_llm.base_url)
    with Memory(path, embedder=HashEmbedder()) as memory:
        assert memory.llm is None
        memory.retrieve("Where was Alice Moreau born?")
    assert main(["retrieve", "Where was Alice Moreau born?", "--memory", str(path), "--embedder", "hash"]) == 0
    assert fake_llm.attempts == 0
    assert resolve_llm(path) is None
    # the user may opt in for a memory they trust
    monkeypatch.setenv("ENGRAM_TRUST_MEMORY_CONFIG", "1")
    chat = resolve_llm(path)
    assert isinstance(chat, OpenAIChat) and chat.url == fake_llm.base_url
    chat.close()


def test_the_user_config_file_configures_the_llm(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    user_dir = tmp_path / "user-config" / "engram"
    user_dir.mkdir(parents=True)
    (user_dir / "config.json").write_text(json.dumps({"llm": {"base_url": fake_llm.base_url, "model": "m1"}}))
    chat = resolve_llm(tmp_path / "no-memory-yet")
    assert isinstance(chat, OpenAIChat) and (chat.url, chat.model) == (fake_llm.base_url, "m1")
    chat.close()


def test_the_sqlite_files_are_private(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        files = [p for p in (tmp_path / "m").iterdir() if p.name.startswith("engram.sqlite")]
        assert {p.name for p in files} >= {"engram.sqlite", "engram.sqlite-wal"}
        for p in files:
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p.name


def test_credentials_in_a_base_url_are_never_echoed(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    port = fake_llm.base_url.split(":")[2].split("/")[0]
    chat = OpenAIChat("m", base_url=f"http://user:hunter2@127.0.0.1:{port}/v1", timeout=2, max_retries=0)
    try:
        assert "hunter2" not in chat.url and "hunter2" not in repr(chat) and "hunter2" not in chat.identity
        fake_llm.push(reply("x"))
        fake_llm.handler = None
        with pytest.raises(LLMError) as caught:
            chat.complete([{"role": "user", "content": "hi"}])  # unscripted after the first: HTTP 400
            chat.complete([{"role": "user", "content": "hi"}])
        assert "hunter2" not in str(caught.value)
    finally:
        chat.close()


def test_stop_loops_is_a_switch_read_from_the_environment() -> None:
    from engram.errors import InputError
    from engram.llm.factory import llm_settings, make_chat

    base = {"ENGRAM_LLM_BASE_URL": "http://127.0.0.1:9/v1", "ENGRAM_LLM_MODEL": "m"}
    on = make_chat(llm_settings(environ={**base, "ENGRAM_LLM_STOP_LOOPS": "1"}))
    off = make_chat(llm_settings(environ=base))
    assert isinstance(on, OpenAIChat) and on.stop_loops is True
    assert isinstance(off, OpenAIChat) and off.stop_loops is False
    with pytest.raises(InputError, match=r"ENGRAM_LLM_STOP_LOOPS .* must be 1 or 0, not 'maybe'"):
        llm_settings(environ={**base, "ENGRAM_LLM_STOP_LOOPS": "maybe"})
