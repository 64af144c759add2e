"""The packaged local LLM (`engram local`, `--llm local`): joining the model parts with their checksum, and the
server's life as a subprocess, run against a stand-in llama-server (tests/fake_llama_server.py) that serves the
scripted OpenAI API. The real model is exercised by tests/test_real_llm.py when it is installed."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram.llm.local_install import MODEL_BYTES, LocalPaths, LocalSetupError, install, join_parts
from engram.llm.local_server import LocalServer, LocalServerError
from helpers import DOCS

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def fake_install(root: Path) -> LocalPaths:
    """A local installation whose model is a sparse file of the right size and whose llama-server is the
    stand-in."""
    paths = LocalPaths(root)
    paths.model.parent.mkdir(parents=True)
    with open(paths.model, "wb") as model:
        model.truncate(MODEL_BYTES)
    paths.server.parent.mkdir(parents=True)
    paths.server.write_text(
        f"#!/bin/sh\nPYTHONPATH={SRC}:{TESTS} exec {sys.executable} {TESTS / 'fake_llama_server.py'} \"$@\"\n"
    )
    paths.server.chmod(0o755)
    return paths


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_join_parts_checks_size_and_sha256_and_writes_atomically(tmp_path: Path) -> None:
    parts = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 3]
    whole = b"".join(parts)
    target = tmp_path / "model.gguf"
    join_parts((io.BytesIO(p) for p in parts), target, lambda line: None, hashlib.sha256(whole).hexdigest(), len(whole))
    assert target.read_bytes() == whole
    with pytest.raises(LocalSetupError, match="a part is damaged"):
        damaged = [parts[0], b"b" * 776 + b"x", parts[2]]
        join_parts((io.BytesIO(p) for p in damaged), target, lambda line: None, hashlib.sha256(whole).hexdigest(),
                   len(whole))  # fmt: skip
    assert target.read_bytes() == whole  # the good file was not replaced by the damaged join
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]  # no partial file left behind


def test_install_skips_what_is_in_place(tmp_path: Path) -> None:
    paths = fake_install(tmp_path / "local")
    lines: list[str] = []
    install(paths.root, progress=lines.append)
    assert lines == [f"model: {paths.model} (already in place)", f"llama-server: {paths.server} (already built)"]


def test_server_starts_answers_and_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_LLAMA_RECORD", str(record))
    paths = fake_install(tmp_path / "local")
    with LocalServer(paths, threads=2, slots=3) as server:
        from engram.extract.openie import ner_messages
        from engram.llm.openai_chat import OpenAIChat

        with OpenAIChat(server.model, base_url=server.base_url) as chat:
            assert json.loads(chat.complete(ner_messages("Paris lies in France."), json=True)) == {
                "entities": ["Paris", "France"]
            }
        seen = json.loads(record.read_text())
        assert seen["argv"][seen["argv"].index("--frequency-penalty") + 1] == "0.3"
        assert seen["argv"][seen["argv"].index("-np") + 1] == "3"
        assert seen["argv"][seen["argv"].index("-c") + 1] == str(3 * 4096)
        assert seen["argv"][seen["argv"].index("--host") + 1] == "127.0.0.1"
        pid = seen["pid"]
        assert alive(pid)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


def test_a_server_that_crashes_at_start_is_reported_with_its_log(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_LLAMA_CRASH", "3")
    paths = fake_install(tmp_path / "local")
    start = time.monotonic()
    with pytest.raises(LocalServerError) as caught:
        LocalServer(paths).start()
    assert time.monotonic() - start < 30  # reported, not waited on for the startup timeout
    assert "exited with code 3" in str(caught.value)
    assert "file is damaged" in str(caught.value)  # the end of its log is quoted


def test_missing_installation_names_the_setup_command(tmp_path: Path) -> None:
    with pytest.raises(LocalServerError, match="engram local setup"):
        LocalServer(LocalPaths(tmp_path / "nothing")).start()


def engram(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def cli_env(tmp_path: Path, root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_LLM_")}
    return {**env, "ENGRAM_LOCAL_DIR": str(root), "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1",
            "FAKE_LLAMA_RECORD": str(tmp_path / "record.json")}  # fmt: skip


def test_index_and_retrieve_with_llm_local(tmp_path: Path) -> None:
    paths = fake_install(tmp_path / "local")
    folder = tmp_path / "docs"
    folder.mkdir()
    for doc in DOCS:
        (folder / f"{doc.id}.txt").write_text(f"{doc.title}\n\n{doc.text}\n")
    env = cli_env(tmp_path, paths.root)
    memory = str(tmp_path / "m")
    done = engram(["index", str(folder), "--memory", memory, "--embedder", "hash", "--llm", "local"], env)
    assert done.returncode == 0, done.stderr
    assert "local model qwen2.5-coder-1.5b-instruct-q4_k_m at http://127.0.0.1:" in done.stderr
    assert f"extractions: 0 imported, {len(DOCS)} extracted, 0 failed" in done.stderr
    pid = json.loads((tmp_path / "record.json").read_text())["pid"]
    assert not alive(pid)  # stopped when the command ended
    stats = engram(["stats", "--memory", memory, "--json"], env)
    assert json.loads(stats.stdout)["facts"] > 0
    found = engram(["retrieve", "Who founded Zenith Foods?", "--memory", memory, "--llm", "local", "--json"], env)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["filtered"] is True  # the recognition filter ran on the local server
    asked = engram(["ask", "Who founded Zenith Foods?", "--memory", memory, "--llm", "local"], env)
    assert asked.returncode == 0, asked.stderr
    assert not alive(json.loads((tmp_path / "record.json").read_text())["pid"])


def test_llm_local_refuses_an_explicit_endpoint_and_reports_a_crash(tmp_path: Path) -> None:
    paths = fake_install(tmp_path / "local")
    env = cli_env(tmp_path, paths.root)
    both = engram(["retrieve", "q", "--memory", str(tmp_path / "m"), "--llm", "local", "--llm-model", "x"], env)
    assert both.returncode == 1 and "leave out --llm-base-url and --llm-model" in both.stderr
    crashed = engram(["retrieve", "q", "--memory", str(tmp_path / "m"), "--llm", "local"],
                     {**env, "FAKE_LLAMA_CRASH": "7"})  # fmt: skip
    assert crashed.returncode == 1 and "Traceback" not in crashed.stderr
    assert "llama-server exited with code 7 while starting" in crashed.stderr
    missing = engram(["retrieve", "q", "--memory", str(tmp_path / "m"), "--llm", "local"],
                     {**env, "ENGRAM_LOCAL_DIR": str(tmp_path / "none")})  # fmt: skip
    assert missing.returncode == 1 and "run `engram local setup`" in missing.stderr


def test_the_server_dies_with_a_killed_engram(tmp_path: Path) -> None:
    paths = fake_install(tmp_path / "local")
    env = cli_env(tmp_path, paths.root)
    parent = subprocess.Popen([sys.executable, "-m", "engram.cli", "local", "serve"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert parent.stdout is not None
        first = parent.stdout.readline()
        assert first.startswith("ENGRAM_LLM_BASE_URL=http://127.0.0.1:"), parent.stderr.read() if parent.stderr else ""
        pid = json.loads((tmp_path / "record.json").read_text())["pid"]
        assert alive(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid)
    finally:
        parent.kill()
        parent.wait()
