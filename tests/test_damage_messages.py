"""Issue 52, item 7: damage and odd input that used to end in a traceback give "engram: error: ..." naming the
file and what to do, with exit 1 (or, for a damaged cache row, a warning and the right result); `engram mcp`
answers every line it is sent."""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engram import Memory, MemoryFormatError
from engram.cli import main
from engram.embed import HashEmbedder
from helpers import DOCS, EXTRACTIONS, cli_refused

QUESTION = "Where was Alice Moreau born?"


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER", "ENGRAM_EXTRACTOR", "ENGRAM_MAX_FILE_MB")
    for name in names:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("built") / "m"
    # the embedding cache keeps the vectors too (not only the snapshot), so that its damage can be tested
    keep = {"graph": {"keep_vector_cache": True}}
    with Memory(path, embedder=HashEmbedder(), llm=False, config=keep) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
    return path


def damaged(built: Path, tmp_path: Path, sql: str = "", snapshot: bool = True) -> Path:
    """A copy of the built memory with `sql` run on its records; `snapshot=False` removes index/ so that the
    next open reads everything from engram.sqlite."""
    path = tmp_path / "m"
    shutil.copytree(built, path)
    if sql:
        db = sqlite3.connect(path / "engram.sqlite")
        db.execute(sql)
        db.commit()
        db.close()
    if not snapshot:
        shutil.rmtree(path / "index")
    return path


def retrieve_refused(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    return cli_refused(capsys, ["retrieve", QUESTION, "-m", str(path), "--method", "dense"])


def test_a_generation_that_is_not_a_number(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged(built, tmp_path, "UPDATE meta SET value = 'abc' WHERE key = 'generation'")
    message = retrieve_refused(capsys, path)
    assert "engram.sqlite is damaged" in message and "generation 'abc'" in message and "backup" in message
    memory = Memory(path, llm=False)
    with pytest.raises(MemoryFormatError, match="not a commit number"):
        memory.stats()
    memory.close()


def test_a_config_section_that_is_not_an_object(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged(built, tmp_path)
    wrong = (({"graph": 5}, "graph"), ({"retrieve": ["damping"]}, "retrieve"), ({"chunk": "x"}, "chunk"))
    for config, section in wrong:
        (path / "config.json").write_text(json.dumps(config))
        message = retrieve_refused(capsys, path)
        assert str(path / "config.json") in message and f'"{section}" must be a JSON object of settings' in message
    (path / "config.json").write_bytes(b'{"graph": "\xff"}')
    assert "config.json is not valid JSON" in retrieve_refused(capsys, path)


def test_a_file_in_place_of_the_snapshot_folder(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged(built, tmp_path, snapshot=False)
    (path / "index").write_text("not a folder")
    message = retrieve_refused(capsys, path)
    assert f"{path / 'index'} is a file" in message and "move or delete that file" in message
    (path / "index").unlink()  # what the message says to do works
    assert main(["retrieve", QUESTION, "-m", str(path), "--method", "dense"]) == 0


def test_an_embedding_of_the_wrong_length_is_embedded_again(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    capsys.readouterr()
    assert main(["retrieve", QUESTION, "-m", str(built), "--method", "dense", "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["passages"]
    path = damaged(built, tmp_path, "UPDATE embeddings SET vector = substr(vector, 1, 10)", snapshot=False)
    with caplog.at_level(logging.WARNING, logger="engram"):
        assert main(["retrieve", QUESTION, "-m", str(path), "--method", "dense", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passages"] == expected  # the right vectors, not garbage
    warned = [r.getMessage() for r in caplog.records]
    assert any("wrong length" in m and "embedding their texts again" in m for m in warned), warned
    db = sqlite3.connect(path / "engram.sqlite")
    lengths = {n for (n,) in db.execute("SELECT DISTINCT length(vector) FROM embeddings")}
    db.close()
    assert lengths <= {HashEmbedder().dim * 4}  # no damaged row is left (the close moved the vectors to the snapshot)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="engram"):
        assert main(["retrieve", QUESTION, "-m", str(path), "--method", "dense", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passages"] == expected
    assert not [r.getMessage() for r in caplog.records if "wrong length" in r.getMessage()]


@pytest.mark.parametrize("column", ["passages.title", "passages.text", "documents.metadata"])
def test_stored_text_that_is_not_utf8(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str
) -> None:
    table, name = column.split(".")
    path = damaged(built, tmp_path, f"UPDATE {table} SET {name} = CAST(x'fffe41' AS TEXT)", snapshot=False)
    message = retrieve_refused(capsys, path)
    assert "engram.sqlite is damaged" in message and "Could not decode to UTF-8" in message, message
    assert "restore it from a backup" in message


def test_index_refuses_devices_and_files_over_the_size_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = ["-m", str(tmp_path / "m"), "--embedder", "hash"]
    if Path("/dev/zero").exists():  # endless: it used to be read until memory ran out
        assert "nothing to index" in cli_refused(capsys, ["index", "/dev/zero", *mem])
    big = tmp_path / "big.txt"
    big.write_text("word " * 2000, encoding="utf-8")  # 10 kB
    monkeypatch.setenv("ENGRAM_MAX_FILE_MB", "0.005")
    assert main(["index", str(big), *mem]) == 1
    err = capsys.readouterr().err
    assert "larger than 0.005 MB" in err and "ENGRAM_MAX_FILE_MB" in err and "Traceback" not in err
    monkeypatch.setenv("ENGRAM_MAX_FILE_MB", "0.02")
    assert main(["index", str(big), *mem]) == 0


def test_index_says_why_a_pipe_is_skipped(tmp_path: Path) -> None:
    """A named pipe blocks whoever opens it until a writer comes: it used to hang `engram index` for good
    (run in a subprocess with a deadline, so that a regression fails instead of hanging the tests)."""
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    code = "import sys; from engram.cli import main; sys.exit(main())"
    args = [sys.executable, "-c", code, "index", str(fifo), "-m", str(tmp_path / "m"), "--embedder", "hash"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "not a regular file" in done.stderr and "Traceback" not in done.stderr


# --- engram mcp over stdio --------------------------------------------------------------------------------


class Stdio:
    """`engram mcp` in a subprocess, spoken to line by line; every read has a deadline."""

    def __init__(self, memory: Path) -> None:
        pytest.importorskip("mcp", reason="the server extra is not installed")
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
        code = "import sys; from engram.cli import main; sys.exit(main())"
        args = [sys.executable, "-c", code, "mcp", "--memory", str(memory), "--embedder", "hash"]
        pipe = subprocess.PIPE
        self.proc = subprocess.Popen(args, stdin=pipe, stdout=pipe, stderr=pipe, env=env)
        self.buffer = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def reply(self, timeout: float = 30.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise AssertionError(f"engram mcp sent no reply in {timeout} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError("engram mcp closed its output")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=30)
        finally:
            self.proc.kill()
        return code, self.proc.stderr.read().decode("utf-8", "replace")


def request(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


def test_mcp_over_stdio_answers_lines_it_cannot_read(built: Path) -> None:
    server = Stdio(built)
    try:
        server.send(b"this is not json")
        parse = server.reply()
        assert parse["id"] is None and parse["error"]["code"] == -32700
        server.send(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/list", ')  # cut short
        assert server.reply()["error"]["code"] == -32700
        server.send(b"\xff\xfe not utf-8")
        assert "not UTF-8" in server.reply()["error"]["message"]
        bad = request(7, "tools/call", {"name": "recall", "arguments": {"query": "\\ud800"}})
        server.send(bad.replace(b"\\\\", b"\\"))  # the JSON escape \ud800, a lone surrogate
        surrogate = server.reply()
        assert surrogate["id"] == 7 and "lone surrogate (U+D800)" in surrogate["error"]["message"]
        server.send(b'{"id": 8, "question": "not JSON-RPC"}')
        wrong = server.reply()
        assert wrong["id"] == 8 and wrong["error"]["code"] == -32600
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        server.send(request(1, "initialize", hello))
        assert server.reply()["result"]["serverInfo"]["name"] == "engram"  # good lines still reach the server
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        server.send(request(2, "tools/call", {"name": "recall", "arguments": {"query": QUESTION, "top_k": 1}}))
        found = server.reply()
        assert found["id"] == 2 and found["result"]["structuredContent"]["passages"][0]["id"] == "alice"
    finally:
        code, err = server.close()
    assert code == 0 and "Traceback" not in err, err
