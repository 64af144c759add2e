"""What the server serves without a key, its access log and slow bodies (issue 52, item 8): with keys, only
/v1/health and the web page's own files answer without one; no Swagger UI (FastAPI's loads from a CDN), the
OpenAPI schema only with --docs and behind the key; a key in a query string never reaches the access log; a
body shorter than its Content-Length gets 408 after the body timeout instead of holding the connection."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engram.server.settings import parse_key_entries
from server_helpers import error_of, hash_settings, seeded_memory, serve

KEY = "0123456789abcdef-security"


def test_only_health_and_the_page_answer_without_a_key(tmp_path: Path) -> None:
    keys = parse_key_entries(KEY, "test")
    with serve(hash_settings(memory=seeded_memory(tmp_path / "m"), keys=keys)) as server, server.client() as http:
        assert http.get("/v1/health").status_code == 200
        page = http.get("/")
        assert page.status_code == 200 and "Acme" not in page.text  # the page holds no memory's data
        assert http.get("/app.js").status_code == 200
        for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
            assert http.get(path).status_code == 404, path
        assert http.get("/v1/memories").status_code == 401
        assert http.get("/v1/memories/default/documents").status_code == 401


def test_docs_serve_the_schema_behind_the_key(tmp_path: Path) -> None:
    keys = parse_key_entries(KEY, "test")
    settings = hash_settings(memory=seeded_memory(tmp_path / "m"), keys=keys, docs=True)
    with serve(settings) as server, server.client() as anonymous, server.client(KEY) as http:
        assert anonymous.get("/openapi.json").status_code == 401
        assert http.get("/openapi.json").json()["info"]["title"] == "engram"
        assert http.get("/docs").status_code == 404  # no Swagger UI from a CDN


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def access_lines() -> Iterator[list[str]]:
    handler, logger = Lines(), logging.getLogger("uvicorn.access")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


def test_a_key_in_the_query_string_is_not_logged(tmp_path: Path) -> None:
    secret = "s3cr3t-in-the-url-0042"
    settings = hash_settings(memory=seeded_memory(tmp_path / "m"))
    with serve(settings, log_level="info") as server, access_lines() as lines:
        with server.client() as http:
            http.get(f"/v1/health?api_key={secret}")
            http.get(f"/v1/memories/default/documents?limit=2&TOKEN={secret}&prefix=ac")
            http.get("/v1/health?limit=5")
        deadline = time.monotonic() + 5
        while len(lines) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(lines) == 3, lines
    assert not any(secret in line for line in lines), lines
    assert "api_key=***" in lines[0] and "limit=2&TOKEN=***&prefix=ac" in lines[1] and "limit=5" in lines[2]


def test_a_body_shorter_than_its_content_length_is_cut_off(tmp_path: Path) -> None:
    settings = hash_settings(memory=seeded_memory(tmp_path / "m"), body_timeout=1.0)
    with serve(settings) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            head = (
                "POST /v1/memories/default/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            )
            conn.sendall(head.encode() + b'{"query": "Oslo"')  # 16 of the 100 bytes announced
            start = time.monotonic()
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = conn.recv(65536)  # socket.timeout (10 s) when the server never answers
                if not chunk:
                    break
                received += chunk
            elapsed = time.monotonic() - start
            while chunk:  # then the server closes the connection (its request was never whole)
                chunk = conn.recv(65536)
    assert received.startswith(b"HTTP/1.1 408"), received[:200]
    assert b"request_timeout" in received or b"content-length" in received.lower()
    assert elapsed < 5


def test_a_loopback_server_answers_only_for_this_machine(tmp_path: Path) -> None:
    with serve(hash_settings(root=tmp_path / "root")) as server, server.client() as http:
        assert http.get("/v1/health").status_code == 200
        for host in ("localhost", "127.0.0.1:8300", "[::1]:8300"):
            assert http.get("/v1/health", headers={"host": host}).status_code == 200
        for host in ("attacker.example", "attacker.example:8300", "127.0.0.1.nip.io"):
            response = http.get("/v1/memories", headers={"host": host})
            assert error_of(response) == (421, "wrong_host")
            response = http.delete("/v1/memories/notes/documents/a", headers={"host": host})
            assert error_of(response) == (421, "wrong_host")
