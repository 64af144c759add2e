"""The ASGI app: REST under /v1, MCP (streamable HTTP) at /mcp, the web page at /.

Public without a key: /v1/health and the page's own files (HTML, CSS, JavaScript: no memory's data; the page
asks for the key). No Swagger UI (FastAPI's loads from a CDN into this origin); with `docs` on, the OpenAPI
schema at /openapi.json, behind the keys like every other route. A request body must arrive whole within
`body_timeout` seconds (408), and the access log shows no credential sent in a query string."""

from __future__ import annotations

import ipaddress
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import engram
from engram.errors import EngramError
from engram.server.access_log import redact_access_log
from engram.server.auth import Access
from engram.server.errors import ApiError, api_error
from engram.server.jobs import Jobs
from engram.server.mcp_tools import build_mcp
from engram.server.registry import Registry
from engram.server.routes import build_router
from engram.server.service import Service
from engram.server.settings import ServerSettings, is_loopback

STATIC = Path(__file__).parent / "static"
log = logging.getLogger("engram.server")


def create_app(settings: ServerSettings) -> FastAPI:
    """Everything `engram serve` serves, for uvicorn (or any ASGI server)."""
    access = Access(settings.keys)
    registry = Registry(settings)
    jobs = Jobs(settings.job_workers)
    service = Service(registry, jobs)
    mcp = build_mcp(service, access)
    mcp_app = mcp.streamable_http_app(streamable_http_path="/mcp", host=settings.host)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # threads that run engram for requests (FastAPI's sync routes); numpy and scipy release the GIL, so
        # several per core keep the CPUs busy (bench/bench_server.py measured 2, 16 and 32)
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.request_threads
        async with mcp.session_manager.run():
            try:
                yield
            finally:
                jobs.close()
                registry.close()

    app = FastAPI(
        title="engram",
        version=engram.__version__,
        description="A HippoRAG 2 memory for LLMs over REST, MCP (/mcp) and a web page (/).",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.service, app.state.access = service, access
    app.include_router(build_router(service, access))
    if settings.docs:

        @app.get("/openapi.json", include_in_schema=False)
        def openapi(request: Request) -> JSONResponse:
            access.identify(request.headers.get("authorization"))
            return JSONResponse(app.openapi())

    redact_access_log()
    for route in mcp_app.routes:
        if isinstance(route, Route) and route.path == "/mcp":
            app.router.routes.append(Route("/mcp", KeyGuard(route.app, access), methods=["GET", "POST", "DELETE"]))
    _add_error_handlers(app)
    app.mount("/", StaticFiles(directory=STATIC, html=True), name="page")
    app.add_middleware(BodyLimit, max_body=settings.max_body, timeout=settings.body_timeout)
    if not settings.keys and is_loopback(settings.host):
        app.add_middleware(LoopbackHosts)
    app.add_middleware(Timing)
    return app


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{_field(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()]
        return _error_response(ApiError(400, "bad_input", "; ".join(problems) or "invalid request"))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error_response(ApiError(exc.status_code, kind, str(exc.detail)))

    async def on_library_error(request: Request, exc: Exception) -> JSONResponse:
        error = api_error(exc)
        if error.status == 503:  # the LLM is missing or unreachable: the message says it all, no traceback
            log.warning("%s %s: %s", request.method, request.url.path, exc)
        elif error.status >= 500:
            log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error_response(error)

    # engram's errors are answered here; anything else reaches Starlette's last-resort handler below, which
    # answers the same JSON 500 and lets uvicorn log the traceback
    app.add_exception_handler(EngramError, on_library_error)
    app.add_exception_handler(sqlite3.Error, on_library_error)
    app.add_exception_handler(Exception, on_library_error)


def _field(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


class KeyGuard:
    """Refuses MCP requests without a valid key (401) when keys are configured; tools check scopes."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            try:
                self.access.identify(header or None)
            except ApiError as error:
                await _error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Timing:
    """`Server-Timing: app;dur=MS` on every response: the time from the request's arrival in the app to its
    response headers, so clients can tell the server's work from the network's and their own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                timing = f"app;dur={1000 * (time.perf_counter() - start):.2f}".encode()
                message = {**message, "headers": [*message.get("headers", []), (b"server-timing", timing)]}
            await send(message)

        await self.app(scope, receive, timed)


class LoopbackHosts:
    """A server bound to loopback without API keys answers only requests whose Host header names this machine
    (an IP address, localhost): a web page whose own domain name is rebound to 127.0.0.1 (DNS rebinding) would
    otherwise read and change every memory through the visitor's browser. 421, as the MCP transport answers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            name = host if host.endswith("]") else host.rsplit(":", 1)[0]  # without the port; [::1] kept whole
            if not (name == "localhost" or _is_ip(name.strip("[]"))):
                error = ApiError(421, "wrong_host", f"this server answers for 127.0.0.1 or localhost, not {host!r}")
                await _error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class BodyLimit:
    """413 for request bodies over `max_body` bytes: at once from Content-Length, or while reading a body
    sent without one. 408 for a body not whole within `timeout` seconds (one shorter than its Content-Length
    would hold the connection and its request forever); the server then closes the connection."""

    def __init__(self, app: ASGIApp, max_body: int, timeout: float) -> None:
        self.app, self.max_body, self.timeout = app, max_body, timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await self._refuse(scope, receive, send)
            return
        chunks: list[Message] = []
        size, more = 0, True
        with anyio.move_on_after(self.timeout) as waited:
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    chunks.append(message)
                    break
                size += len(message.get("body", b""))
                if size > self.max_body:
                    await self._refuse(scope, receive, send)
                    return
                chunks.append(message)
                more = bool(message.get("more_body"))
        if waited.cancelled_caught:
            late = ApiError(408, "request_timeout", f"the request body did not arrive within {self.timeout:g} s")
            await _error_response(late)(scope, receive, send)
            return
        await self.app(scope, _replay(chunks, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = ApiError(413, "too_large", f"the request body is over the limit of {self.max_body} bytes")
        await _error_response(error)(scope, receive, send)


def _replay(chunks: list[Message], receive: Receive) -> Receive:
    pending = list(chunks)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
