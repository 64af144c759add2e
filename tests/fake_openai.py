"""A scripted OpenAI-compatible HTTP server for tests (a real server on 127.0.0.1, nothing patched).

Use it through the `fake_llm` fixture (tests/conftest.py), which yields a started `FakeOpenAI`:

    def test_something(fake_llm):
        fake_llm.push(reply('{"entities": ["Paris"]}'), error(429, retry_after=0.05), "plain text")
        fake_llm.handler = lambda request: reply("Answer: Paris")   # used once the queue is empty
        chat = fake_llm.chat()            # OpenAIChat on fake_llm.base_url, short timeout, tiny backoff
        ...
        fake_llm.requests                 # every chat request body (parsed JSON), in arrival order
        fake_llm.attempts                 # how many chat requests arrived

Each POST {base_url}/chat/completions takes the next queued spec, else `handler(request_json)`, else fails
with HTTP 400 "no scripted response" (so an unscripted call fails fast instead of being retried). A spec
is a `Spec` (built with `reply`, `error`, `hang`, `unknown_model`) or a plain string (a reply with that
content). Requests for a model not in `models` get the OpenAI-style 404 "model_not_found" automatically;
with `required_key` set, requests without `Authorization: Bearer <required_key>` get a 401.
GET {base_url}/models lists `models`; GET /health answers ok, as llama-server's does. `task_of(request)` tells
which engram prompt a request carries ("ner", "triples", "filter", "reader" or "other"), and
`last_user_text(request)` gives its last user message, for handlers that answer by content.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engram.extract.openie import NER_SYSTEM, TRIPLES_SYSTEM
from engram.llm.openai_chat import OpenAIChat
from engram.qa import READER_SYSTEM
from engram.retrieve.recognition import FILTER_SYSTEM

DEFAULT_MODEL = "fake-model"
TRICKLE = "X-Fake-Trickle"  # set by `handle_post` on a reply the handler sends one byte at a time
STREAM = "X-Fake-Stream"  # set by `handle_post` on a reply to a `"stream": true` request (sent as events)
STREAM_PIECE = 8  # characters of content per streamed event


@dataclass
class Spec:
    """One scripted answer: a completion (`status` 200) or an error status with an OpenAI-style body.
    `delay` seconds pass before anything is sent (longer than the client timeout: a hang); with `trickle`, the
    body goes out one byte every `trickle` seconds (each read is quick, the whole reply never is)."""

    content: str = ""
    finish_reason: str = "stop"
    status: int = 200
    error_message: str = ""
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    trickle: float = 0.0


def reply(content: str, finish_reason: str = "stop", delay: float = 0.0) -> Spec:
    return Spec(content=content, finish_reason=finish_reason, delay=delay)


def error(status: int, message: str = "scripted error", retry_after: float | None = None) -> Spec:
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    return Spec(status=status, error_message=message, headers=headers)


def hang(seconds: float, content: str = "too late") -> Spec:
    return Spec(content=content, delay=seconds)


def trickle(every: float, content: str = "too slow") -> Spec:
    return Spec(content=content, trickle=every)


def unknown_model(model: str = "missing-model") -> Spec:
    return Spec(
        status=404,
        error_message=f"The model `{model}` does not exist or you do not have access to it.",
        error_code="model_not_found",
    )


# A handler may return None to leave the request unscripted (HTTP 400).
Handler = Callable[[dict[str, Any]], "Spec | str | None"]


class InFlight:
    """Counts handler calls running at once (`with in_flight: ...` inside a handler); `peak` is the most seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __enter__(self) -> InFlight:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


def last_user_text(request: dict[str, Any]) -> str:
    users = [m.get("content", "") for m in request.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]) if users else ""


def task_of(request: dict[str, Any]) -> str:
    messages = request.get("messages", [])
    system = messages[0].get("content") if messages and messages[0].get("role") == "system" else None
    tasks = {NER_SYSTEM: "ner", TRIPLES_SYSTEM: "triples", FILTER_SYSTEM: "filter", READER_SYSTEM: "reader"}
    return tasks.get(system, "other") if isinstance(system, str) else "other"


def passage_of(request: dict[str, Any]) -> str:
    """The passage block ("title\ntext") an extraction request carries, "" for other requests."""
    text = last_user_text(request)
    if "Passage:\n" not in text:
        return ""
    return text.split("Passage:\n", 1)[1].split("\n\nNamed entities: ", 1)[0]


def openie_answer(request: dict[str, Any]) -> str | None:
    """A deterministic extraction answer by content: the entities are the passage's capitalised words, the
    triples chain them ("A", "precedes", "B"). None for requests that are not extraction prompts."""
    task = task_of(request)
    words = [w.strip(".,;:!?\"'()") for w in passage_of(request).split()]
    entities = list(dict.fromkeys(w for w in words if w[:1].isupper()))
    if task == "ner":
        return json.dumps({"entities": entities})
    if task == "triples":
        return json.dumps({"triples": [[a, "precedes", b] for a, b in itertools.pairwise(entities)]})
    return None


def openie_handler(delay: float = 0.0) -> Handler:
    """A handler answering extraction prompts with `openie_answer` after `delay` seconds."""

    def handle(request: dict[str, Any]) -> Spec | str | None:
        answer = openie_answer(request)
        return None if answer is None else reply(answer, delay=delay)

    return handle


class FakeOpenAI:
    """The server. `start()` / `close()`; thread-safe; see the module docstring for the scripting API."""

    def __init__(self, models: tuple[str, ...] = (DEFAULT_MODEL,), port: int = 0) -> None:
        self.models = models
        self.handler: Handler | None = None
        self.required_key: str | None = None
        self.requests: list[dict[str, Any]] = []
        self.events_sent: list[int] = []  # per streamed reply: content events written before the client left
        self._queue: deque[Spec | str] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._chats: list[OpenAIChat] = []
        self._server = _Server(("127.0.0.1", port), _make_handler_class(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    @property
    def attempts(self) -> int:
        with self._lock:
            return len(self.requests)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        for chat in self._chats:
            chat.close()
        self._server.shutdown()
        self._server.server_close()

    def closed_within(self, seconds: float) -> bool:
        """Wait up to `seconds`; True as soon as the server is closing (a hang or a trickle then stops)."""
        return self._closing.wait(seconds)

    def push(self, *specs: Spec | str) -> None:
        with self._lock:
            self._queue.extend(specs)

    def chat(self, **options: Any) -> OpenAIChat:
        """An `OpenAIChat` on this server; test-friendly defaults, any constructor argument overrides."""
        settings: dict[str, Any] = {
            "model": DEFAULT_MODEL,
            "base_url": self.base_url,
            "api_key": "test-key",
            "timeout": 5.0,
            "max_retries": 3,
            "backoff_base": 0.001,
            "max_backoff": 1.0,
        }
        settings.update(options)
        chat = OpenAIChat(**settings)
        self._chats.append(chat)
        return chat

    def record_events(self, sent: int) -> None:
        with self._lock:
            self.events_sent.append(sent)

    def record(self, request: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_spec(self, request: dict[str, Any]) -> Spec:
        with self._lock:
            self.requests.append(request)
            queued = self._queue.popleft() if self._queue else None
        if queued is None and self.handler is not None:
            queued = self.handler(request)
        if queued is None:
            return error(400, "fake server: no scripted response left for this request")
        return reply(queued) if isinstance(queued, str) else queued

    def handle_post(self, path: str, auth: str | None, raw: bytes) -> tuple[int, Any, dict[str, str]]:
        """Status, JSON body (None: send nothing, the server is closing) and headers for one POST."""
        if path.rstrip("/") != "/v1/chat/completions":
            return 404, _error_body(f"no route {path}", None), {}
        try:
            request = json.loads(raw)
        except ValueError:
            return 400, _error_body("the body is not JSON", None), {}
        model = request.get("model")
        if self.required_key and auth != f"Bearer {self.required_key}":
            self.record(request)
            spec = Spec(status=401, error_message="Incorrect API key provided", error_code="invalid_api_key")
        elif model not in self.models:
            self.record(request)
            spec = unknown_model(str(model))
        else:
            spec = self._next_spec(request)
        if spec.delay and self._closing.wait(spec.delay):
            return 0, None, {}
        if spec.status != 200:
            return spec.status, _error_body(spec.error_message, spec.error_code), spec.headers
        headers = {**spec.headers, **({TRICKLE: f"{spec.trickle:g}"} if spec.trickle else {})}
        if request.get("stream"):
            headers[STREAM] = "1"
        return 200, _completion(str(model), spec, request), headers

    def models_listing(self) -> dict[str, Any]:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return {"object": "list", "data": data}


def _error_body(message: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def _completion(model: str, spec: Spec, request: dict[str, Any]) -> dict[str, Any]:
    prompt_words = sum(len(str(m.get("content", "")).split()) for m in request.get("messages", []))
    completion_words = len(spec.content.split())
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": spec.content},
                "finish_reason": spec.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_words,
            "completion_tokens": completion_words,
            "total_tokens": prompt_words + completion_words,
        },
    }


class _Server(ThreadingHTTPServer):
    # the accept queue: the standard library's 5 overflows when a test opens 16 connections at once, and the
    # kernel then drops handshakes (the client retries a second later, or sees the connection reset), which a
    # real server's backlog of hundreds does not do
    request_queue_size = 128
    daemon_threads = True
    block_on_close = False


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeOpenAI  # set on the subclass made for each server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        # headers and body go out in two writes: without this, Nagle's algorithm and the client's delayed
        # ACK hold the body back ~40 ms per response, which real servers do not do
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, status: int, body: Any, headers: dict[str, str]) -> None:
        if body is None:
            self.close_connection = True
            return
        if headers.pop(STREAM, None):
            self._send_events(body, float(headers.pop(TRICKLE, 0)))
            return
        data = json.dumps(body).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            every = float(headers.pop(TRICKLE, 0))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if not every:
                self.wfile.write(data)
            for i in range(len(data) if every else 0):
                if self.fake.closed_within(every):
                    break
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
        except OSError:  # the client gave up (timeout) and closed the connection
            self.close_connection = True

    def _send_events(self, completion: dict[str, Any], every: float) -> None:
        """A completion as server-sent events, `STREAM_PIECE` characters of content each (one every `every`
        seconds: the spec's trickle), as OpenAI streams; `FakeOpenAI.events_sent` records how many content
        events went out before the client closed the stream."""
        choice = completion["choices"][0]
        content = choice["message"]["content"]
        pieces = [content[i : i + STREAM_PIECE] for i in range(0, len(content), STREAM_PIECE)]

        def event(delta: dict[str, Any], finish: str | None) -> bytes:
            choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
            chunk = {"id": completion["id"], "object": "chat.completion.chunk", "created": 0,
                     "model": completion["model"], "choices": choices}  # fmt: skip
            return f"data: {json.dumps(chunk)}\n\n".encode()

        self.close_connection = True  # no Content-Length: the end of the stream is the end of the connection
        sent = 0
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in pieces:
                if every and self.fake.closed_within(every):
                    break
                self.wfile.write(event({"content": piece}, None))
                self.wfile.flush()
                sent += 1
            self.wfile.write(event({}, choice["finish_reason"]) + b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass
        finally:
            self.fake.record_events(sent)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, self.fake.models_listing(), {})
        elif self.path == "/health":  # llama-server's readiness check
            self._send(200, {"status": "ok"}, {})
        else:
            self._send(404, _error_body(f"no route {self.path}", None), {})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(*self.fake.handle_post(self.path, self.headers.get("Authorization"), raw))


def _make_handler_class(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    return type("_BoundRequestHandler", (_RequestHandler,), {"fake": fake})
