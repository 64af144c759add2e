"""Security checks against the real server: keys, scopes, read-only, memory names, body size, loopback-only
without keys, and no key in any log line."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

import pytest

from engram.cli import main
from engram.errors import InputError
from engram.server.registry import check_name
from engram.server.settings import load_keys, parse_key_entries
from server_helpers import error_of, hash_settings, seeded_memory, serve

FULL, READER, ONLY_A = "full-access-key-0123456789", "read-only-key-0123456789", "memory-a-key-0123456789"
KEYS = f"{FULL}\n{READER} read-only\n{ONLY_A} memories=a"


def test_key_entries_parse_scopes_and_refuse_mistakes(tmp_path: Path) -> None:
    keys = parse_key_entries(f"# comment\n{FULL}\n\n{READER} read-only\n{ONLY_A} memories=a,b", "keys.txt")
    assert [(k.read_only, k.memories) for k in keys] == [(False, None), (True, None), (False, frozenset("ab"))]
    assert FULL not in repr(keys) and all(FULL not in k.label for k in keys)
    with pytest.raises(InputError, match="at least 16"):
        parse_key_entries("short", "ENGRAM_API_KEYS")
    with pytest.raises(InputError, match="unknown option"):
        parse_key_entries(f"{FULL} admin", "ENGRAM_API_KEYS")
    (tmp_path / "keys.txt").write_text(KEYS, encoding="utf-8")
    assert len(load_keys(tmp_path / "keys.txt", {"ENGRAM_API_KEYS": f"{FULL}-env"})) == 4


def test_keys_scopes_and_read_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    seeded_memory(root / "a")
    seeded_memory(root / "b")
    with serve(hash_settings(root=root, keys=parse_key_entries(KEYS, "test"))) as server:
        with server.client() as anonymous:
            assert anonymous.get("/v1/health").status_code == 200  # the one open route
            assert error_of(anonymous.get("/v1/memories")) == (401, "unauthorized")
            assert error_of(anonymous.post("/v1/memories/a/retrieve", json={"query": "x"})) == (401, "unauthorized")
        with server.client("wrong-key-0123456789") as wrong:
            assert error_of(wrong.get("/v1/memories/a")) == (401, "unauthorized")
        with server.client(READER) as reader:
            assert reader.post("/v1/memories/b/retrieve", json={"query": "Oslo"}).status_code == 200
            new = {"documents": [{"id": "x", "text": "Rome is in Italy."}]}
            assert error_of(reader.post("/v1/memories/b/documents", json=new)) == (403, "forbidden")
            assert error_of(reader.delete("/v1/memories/b/documents/oslo")) == (403, "forbidden")
            assert error_of(reader.put("/v1/memories/b/documents/oslo", json={"text": "y"})) == (403, "forbidden")
            assert reader.get("/v1/memories").json()["memories"][0] == {"name": "a", "writable": False}
        with server.client(ONLY_A) as scoped:
            assert [m["name"] for m in scoped.get("/v1/memories").json()["memories"]] == ["a"]
            assert scoped.post("/v1/memories/a/retrieve", json={"query": "Oslo"}).status_code == 200
            assert error_of(scoped.post("/v1/memories/b/retrieve", json={"query": "Oslo"})) == (403, "forbidden")
            assert error_of(scoped.get("/v1/memories/b/documents")) == (403, "forbidden")
            assert error_of(scoped.get("/v1/memories/b/graph", params={"around": "oslo"})) == (403, "forbidden")
            assert scoped.delete("/v1/memories/a/documents/oslo").status_code == 200
        with server.client(FULL) as full:
            assert full.get("/v1/memories/b/documents").json()["total"] == 5  # b untouched
            assert full.get("/v1/memories/a/documents").json()["total"] == 4


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "a b", "x" * 65, "a\\b", "..x"])
def test_bad_memory_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(Exception, match="invalid memory name"):
        check_name(name)
    root = tmp_path / "root"
    with serve(hash_settings(root=root)) as server, server.client() as http:
        body = {"documents": [{"id": "d", "text": "escape attempt"}]}
        response = http.post(f"/v1/memories/{quote(name, safe='')}/documents", json=body)
        if name == "..":  # the HTTP client resolves /memories/../documents to /documents itself
            assert error_of(response) == (404, "not_found")
        else:
            assert error_of(response) == (400, "bad_input")
            assert "invalid memory name" in response.json()["error"]["message"]
    assert not (tmp_path / "x").exists() and not any(tmp_path.rglob("manifest.json"))


def test_oversized_bodies_are_413_before_auth(tmp_path: Path) -> None:
    settings = hash_settings(memory=seeded_memory(tmp_path / "m"), keys=parse_key_entries(FULL, "t"), max_body=2048)
    with serve(settings) as server, server.client(FULL) as http:
        big = {"documents": [{"id": "big", "text": "word " * 1000}]}
        assert error_of(http.post("/v1/memories/default/documents", json=big)) == (413, "too_large")
        small = {"documents": [{"id": "small", "text": "Rome is in Italy."}]}
        assert http.post("/v1/memories/default/documents", json=small).status_code == 200


def test_no_key_reaches_the_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = hash_settings(memory=seeded_memory(tmp_path / "m"), keys=parse_key_entries(f"{FULL}\n{READER} ro", "t"))
    with serve(settings, log_level="debug") as server:
        for key in (FULL, READER, "not-a-valid-key-987654321"):
            with server.client(key) as http:
                http.get("/v1/memories")
                http.post("/v1/memories/default/documents", json={"documents": [{"id": "z", "text": "Rome."}]})
                http.post("/v1/memories/default/retrieve", json={"query": "Rome", "top_k": 0})
                http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    out, err = capfd.readouterr()
    logged = caplog.text + out + err
    assert "/v1/memories" in logged  # the access log ran at debug level...
    for key in (FULL, READER, "not-a-valid-key-987654321"):
        assert key not in logged and key[:12] not in logged  # ...and holds no key, whole or in part


def test_serving_beyond_loopback_without_keys_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_API_KEYS", raising=False)
    code = main(["serve", "--memory", str(tmp_path / "m"), "--host", "0.0.0.0", "--embedder", "hash"])
    assert code == 1
    message = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0 without API keys" in message and "ENGRAM_API_KEYS" in message
