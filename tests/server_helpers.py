"""Run the real engram server (uvicorn, in a thread, on 127.0.0.1 and a free port) for the server tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed: pip install 'engram[server]'")
pytest.importorskip("mcp", reason="the server extra is not installed: pip install 'engram[server]'")

import uvicorn

from engram import Memory
from engram.embed import HashEmbedder
from engram.server.app import create_app
from engram.server.settings import ServerSettings
from helpers import DOCS, EXTRACTIONS


class Running:
    """A started server: `url`, and `client` (httpx, with the key if given)."""

    def __init__(self, url: str, server: uvicorn.Server, thread: threading.Thread) -> None:
        self.url, self.server, self.thread = url, server, thread

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0)


@contextmanager
def serve(settings: ServerSettings, log_level: str = "warning") -> Iterator[Running]:
    """Start `create_app(settings)` under uvicorn in a thread; stop it on exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(settings), log_level=log_level, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield Running(f"http://127.0.0.1:{port}", server, thread)
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


def hash_settings(**options: Any) -> ServerSettings:
    options.setdefault("embedder", "hash")
    return ServerSettings(**options)


def seeded_memory(path: Path) -> Path:
    """A memory of the five test documents with their hand-written extractions (hash embedder)."""
    with Memory(path, embedder=HashEmbedder(), llm=False) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
    return path


def error_of(response: httpx.Response) -> tuple[int, str]:
    """(status, error type) of an error response, checking the JSON error shape."""
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["message"], body
    return response.status_code, body["error"]["type"]
