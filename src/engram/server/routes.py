"""REST routes under /v1. Each checks the caller's key, then calls `Service` (blocking calls run on FastAPI's
worker threads: the routes are plain functions)."""


import json
import re
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute

import engram
from engram.errors import LLM_HINT, LLMError
from engram.retrieve.method_names import METHODS
from engram.server.auth import Access
from engram.server.errors import ApiError, api_error, bad_input, not_found
from engram.server.registry import check_name
from engram.server.schemas import MAX_ID, AddDocuments, AnswerRequest, RetrieveRequest, UpdateDocument
from engram.server.service import Service, WriteResult
from engram.server.settings import ApiKey
from engram.types import Document


async def _caller(request: Request) -> ApiKey | None:  # async: no thread hop for a dictionary look-up
    access: Access = request.app.state.access
    return access.identify(request.headers.get("authorization"))


Caller = Annotated[ApiKey | None, Depends(_caller)]


class Scope:
    """The service and the key checks the route groups share."""

    def __init__(self, service: Service, access: Access) -> None:
        self.service, self.access = service, access

    def reading(self, name: str, key: ApiKey | None) -> str:
        self.access.check(key, check_name(name))
        return name

    def writing(self, name: str, key: ApiKey | None) -> str:
        self.access.check(key, check_name(name), write=True)
        return name


def build_router(service: Service, access: Access) -> APIRouter:
    """Every /v1 route; the app must hold `access` as `app.state.access`."""
    router, scope = APIRouter(prefix="/v1"), Scope(service, access)
    _memory_routes(router, scope)
    _document_routes(router, scope)
    _query_routes(router, scope)
    _job_routes(router, scope)
    return router


def _memory_routes(router: APIRouter, scope: Scope) -> None:
    service, access = scope.service, scope.access

    @router.get("/health", tags=["server"])
    def health() -> dict[str, Any]:
        """Liveness; needs no key."""
        return {"status": "ok", "version": engram.__version__, "auth": access.enabled}

    @router.get("/memories", tags=["memories"])
    def memories(key: Caller) -> dict[str, Any]:
        """The memories this key may read, with whether it may write them."""
        names = access.visible(key, service.registry.names())
        return {"memories": [{"name": n, "writable": key is None or key.may_write(n)} for n in names]}

    @router.get("/memories/{name}", tags=["memories"])
    def stats(name: str, key: Caller) -> dict[str, Any]:
        """The stats `engram stats` prints."""
        return service.stats(scope.reading(name, key))


def _document_routes(router: APIRouter, scope: Scope) -> None:
    service = scope.service

    @router.get("/memories/{name}/documents", tags=["documents"])
    def documents(
        name: str,
        key: Caller,
        prefix: str = "",
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """Stored documents (id and metadata) in id order; pass `next_cursor` back as `cursor` for the next page."""
        return service.documents(scope.reading(name, key), prefix, limit, cursor)

    @router.post("/memories/{name}/documents", tags=["documents"])
    def add(name: str, body: AddDocuments, key: Caller, response: Response) -> dict[str, Any]:
        """Add documents. Without an LLM: indexed at once (200, the report). With one: a job (202; poll
        /v1/jobs/{id}, or send "wait": true)."""
        docs = [d.to_document() for d in body.documents]
        result = service.add(scope.writing(name, key), docs, body.extractions, body.wait)
        return _write_answer(result, response)

    @router.put("/memories/{name}/documents/{doc_id:path}", tags=["documents"])
    def update(name: str, doc_id: str, body: UpdateDocument, key: Caller, response: Response) -> dict[str, Any]:
        """Replace a document: PUT is replace, not merge. Its text, title and metadata become what the body
        holds; a title or metadata left out is cleared, not kept (send them again to keep them). An unknown id
        is added. Unchanged chunks keep their extractions, so resending the same text costs no LLM call."""
        if len(doc_id) > MAX_ID:
            raise bad_input(f"document ids are at most {MAX_ID} characters (this one has {len(doc_id)})")
        doc = Document(doc_id, body.text, body.title, dict(body.metadata))
        return _write_answer(service.update(scope.writing(name, key), doc, body.extractions, body.wait), response)

    @router.delete("/memories/{name}/documents/{doc_id:path}", tags=["documents"])
    def delete(name: str, doc_id: str, key: Caller) -> dict[str, Any]:
        """Remove a document, its passages and whatever only they stated."""
        return service.delete(scope.writing(name, key), doc_id).as_json()


def _query_routes(router: APIRouter, scope: Scope) -> None:
    service = scope.service

    @router.post("/memories/{name}/retrieve", tags=["queries"])
    def retrieve(name: str, body: RetrieveRequest, key: Caller) -> dict[str, Any]:
        """Ranked passages per query, with the why (facts, seeds, filter, fallback)."""
        queries = _queries(body)
        return {"results": service.retrieve(scope.reading(name, key), queries, body.top_k, body.method)}

    @router.post("/memories/{name}/answer", tags=["queries"], response_model=None)
    def answer(name: str, body: AnswerRequest, key: Caller) -> dict[str, Any] | StreamingResponse:
        """The reader's answer with its passages and facts; `"stream": true` sends server-sent events."""
        queries, name = _queries(body), scope.reading(name, key)
        if not body.stream:
            return {"results": service.answer(name, queries, body.top_k, body.method)}
        memory = service.memory(name)  # an unknown memory is a 404 before the stream starts
        if body.method not in METHODS:  # as are an unknown method (400) and no LLM to answer with (503)
            raise bad_input(f"unknown retrieval method {body.method!r}; choose one of {', '.join(METHODS)}")
        if memory.llm is None:
            raise LLMError("answering needs an LLM: " + LLM_HINT)
        events = _answer_events(service, name, queries, body.top_k, body.method)
        return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    @router.get("/memories/{name}/graph", tags=["queries"])
    def graph(
        name: str,
        key: Caller,
        around: Annotated[list[str], Query(description="phrase or passage id; repeat for several")],
        hops: Annotated[int, Query(ge=1, le=2)] = 1,
        limit: Annotated[int, Query(ge=1, le=500)] = 60,
    ) -> dict[str, Any]:
        """A neighbourhood of the graph (nodes; edges with kind and weight) for pictures."""
        return service.graph(scope.reading(name, key), around, hops, limit)


def _job_routes(router: APIRouter, scope: Scope) -> None:
    service, access = scope.service, scope.access

    @router.get("/jobs/{job_id}", tags=["jobs"])
    def job(job_id: str, key: Caller, wait: Annotated[float, Query(ge=0, le=600)] = 0) -> dict[str, Any]:
        """A job's state, progress per stage, and its report or error; `wait` seconds blocks until it ends."""
        found = service.job(job_id)
        access.check(key, found.memory)
        return service.wait(found, wait).as_json() if wait else found.as_json()

    @router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"], include_in_schema=False)
    def unknown(rest: str, request: Request) -> None:
        """No route matched: a route of that path with other methods is a 405, a memory name holding '/'
        (`a/b`, `../x`) a bad name, anything else a 404."""
        allowed = _methods_for(router, request.url.path)
        if allowed:
            raise ApiError(405, "method_not_allowed", f"{request.method} /v1/{rest}: use {', '.join(allowed)}")
        named = _NAMED_ROUTE.fullmatch(rest)
        if named:
            check_name(named.group(1))
        raise not_found(f"no route /v1/{rest}: README lists the routes (serve --docs: /openapi.json)")


def _methods_for(router: APIRouter, path: str) -> list[str]:
    """The methods of this router's routes (the catch-all aside) whose path matches `path`."""
    methods: set[str] = set()
    for route in router.routes:
        if isinstance(route, APIRoute) and route.name != "unknown" and route.path_regex.fullmatch(path):
            methods |= route.methods or set()
    return sorted(methods - {"HEAD"})


_NAMED_ROUTE = re.compile(r"memories/(.+?)(?:/(?:documents|retrieve|answer|graph)(?:/.*)?)?")


def _queries(body: RetrieveRequest) -> list[str]:
    if body.query is not None and body.queries is not None:  # which one was meant? refuse, never pick one
        raise bad_input('give "query" (one question) or "queries" (a list of questions), not both')
    queries = body.all_queries()
    if not queries:
        raise bad_input("query: give a question (query) or a list of questions (queries)")
    return queries


def _write_answer(result: WriteResult, response: Response) -> dict[str, Any]:
    if result.job is not None and result.job.state not in ("done", "failed"):
        response.status_code = 202
    return result.as_json()


def _answer_events(service: Service, name: str, queries: list[str], top_k: int, method: str) -> Iterator[str]:
    """Server-sent events: `answer` per query as each is ready, `error` if one fails, then `done`."""
    for query in queries:
        try:
            result = service.answer(name, [query], top_k, method)[0]
        except Exception as exc:  # reported in the stream: the 200 status has been sent already
            error = api_error(exc)
            yield _event("error", {"error": {"type": error.type, "message": error.message}, "status": error.status})
            return
        yield _event("answer", result)
    yield _event("done", {"answers": len(queries)})


def _event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
