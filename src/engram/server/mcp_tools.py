"""The MCP tools (official `mcp` SDK), the same over stdio (`engram mcp`) and streamable HTTP (`/mcp`).

Over HTTP the caller's `Authorization: Bearer KEY` header is checked on every call with the REST rules;
over stdio the caller is the local process that started the server, and no key is asked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import ConfigDict

from engram.server.auth import Access
from engram.server.errors import api_error
from engram.server.registry import DEFAULT, check_name
from engram.server.service import Service
from engram.server.settings import ApiKey
from engram.types import Document

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

INSTRUCTIONS = (
    "engram is a long-term memory (HippoRAG 2: a knowledge graph over stored passages). Store what should be "
    "remembered with `remember`, look things up with `recall` (ranked passages plus the facts and entities that "
    "linked them), or get a written answer with `answer`. Memories are named; with a single-memory server the "
    "name is 'default'. Use `list_memories` to see which exist."
)


def build_mcp(service: Service, access: Access) -> MCPServer:
    """An MCPServer whose tools call `service`, checking scopes with `access`."""
    tools, call = Tools(), Guard(access)
    _listing_tools(tools, service, call)
    _query_tools(tools, service, call)
    _write_tools(tools, service, call)
    return MCPServer("engram", instructions=INSTRUCTIONS, log_level="WARNING", tools=tools.tools)


class Tools:
    """Collects the tools; `@tools()` registers one as `@server.tool()` does, but an argument the tool does not
    take is refused (the SDK's default drops it without a word: `remember(metadata=...)` lost the metadata)."""

    def __init__(self) -> None:
        self.tools: list[Tool] = []

    def __call__(self) -> Callable[[F], F]:
        def add(fn: F) -> F:
            tool = Tool.from_function(fn)
            loose = tool.fn_metadata.arg_model

            class Strict(loose):  # type: ignore[misc, valid-type]
                model_config = ConfigDict(extra="forbid")

            Strict.__name__ = loose.__name__
            tool.fn_metadata.arg_model = Strict
            tool.parameters = {**tool.parameters, "additionalProperties": False}
            self.tools.append(tool)
            return fn

        return add


class Guard:
    """Checks the caller's key (HTTP only), then runs the work on a worker thread; errors become ToolErrors
    whose text starts with the REST error type (bad_input, not_found, forbidden, conflict, ...)."""

    def __init__(self, access: Access) -> None:
        self.access = access

    async def __call__(self, ctx: Context, memory: str | None, write: bool, fn: Callable[[ApiKey | None], T]) -> T:
        try:
            headers = ctx.headers
            key = self.access.identify(headers.get("authorization")) if headers is not None else None
            if memory is not None:
                self.access.check(key, check_name(memory), write)
            return await anyio.to_thread.run_sync(fn, key)
        except Exception as exc:
            error = api_error(exc)
            raise ToolError(f"{error.type}: {error.message}") from exc


def _listing_tools(tools: Tools, service: Service, call: Guard) -> None:
    access = call.access

    @tools()
    async def list_memories(ctx: Context) -> dict[str, Any]:
        """List the memories this server holds (names to pass as `memory` to the other tools)."""
        return await call(ctx, None, False, lambda key: {"memories": access.visible(key, service.registry.names())})

    @tools()
    async def stats(ctx: Context, memory: str = DEFAULT) -> dict[str, Any]:
        """How much a memory holds: documents, passages, phrases (entities), facts, graph edges, passages still
        pending extraction, and LLM usage."""
        return await call(ctx, memory, False, lambda _: service.stats(memory))

    @tools()
    async def list_documents(
        ctx: Context, memory: str = DEFAULT, prefix: str = "", limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """List stored document ids (with metadata) in id order, optionally only ids starting with `prefix`. Pass
        the returned `next_cursor` as `cursor` to get the next page."""
        return await call(ctx, memory, False, lambda _: service.documents(memory, prefix, limit, cursor))


def _query_tools(tools: Tools, service: Service, call: Guard) -> None:
    @tools()
    async def recall(
        ctx: Context, query: str, memory: str = DEFAULT, top_k: int = 5, method: str = "hipporag2"
    ) -> dict[str, Any]:
        """Search the memory for passages relevant to `query` (a question or topic). Returns the `top_k` passages,
        best first, each with id, title, text and score, plus why they were found: the facts (subject, relation,
        object) that matched, the entity phrases that seeded the graph search with their weights, and whether the
        search fell back to plain similarity ranking. Use the passages as evidence in your reply. `method` is
        engram's default (hipporag2) unless asked otherwise: dense, bm25, hipporag2-paper, ... as over REST."""
        results = await call(ctx, memory, False, lambda _: service.retrieve(memory, [query], top_k, method))
        return dict(results[0])

    @tools()
    async def answer(
        ctx: Context, query: str, memory: str = DEFAULT, top_k: int = 5, method: str = "hipporag2"
    ) -> dict[str, Any]:
        """Answer `query` (a question) from the memory with the server's LLM reader. Returns the answer text and
        the passages and facts it was based on. Needs an LLM configured on the server; otherwise use `recall` and
        read the passages yourself. `top_k` and `method` are those of `recall`."""
        results = await call(ctx, memory, False, lambda _: service.answer(memory, [query], top_k, method))
        return dict(results[0])


def _write_tools(tools: Tools, service: Service, call: Guard) -> None:
    @tools()
    async def remember(
        ctx: Context,
        text: str | None = None,
        memory: str = DEFAULT,
        id: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        documents: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Store text in long-term memory so it can be recalled later. Give `text` (and optionally a stable `id`,
        a `title` and a `metadata` object; the same id later replaces the text), or `documents`: a list of
        {"id", "text", "title"?, "metadata"?}. The memory is created on first use. Waits until the text is
        searchable, then returns the ids `added` and `updated`, how many documents were `unchanged`, and any
        `skipped` with the reason (an empty text, say)."""
        docs = _documents(text, id, title, metadata, documents)
        written = await call(ctx, memory, True, lambda _: service.add(memory, docs, None, wait=True).as_json())
        return _short(written, ("added", "updated", "unchanged", "skipped", "failed"))

    @tools()
    async def forget(ctx: Context, document_id: str, memory: str = DEFAULT) -> dict[str, Any]:
        """Delete a stored document (by the id it was remembered under) and everything only it contributed: its
        passages, and the facts and entities no other passage states. Returns the ids `deleted`."""
        written = await call(ctx, memory, True, lambda _: service.delete(memory, document_id).as_json())
        return _short(written, ("deleted",))


def _short(written: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """What an agent needs from a write: the ids it touched (the full report, with timings, stays in REST); a
    job still running after the wait is returned as its id and state to look up later."""
    report = written.get("report")
    if report is None:
        job = written.get("job") or {}
        return {"job": job.get("id"), "state": job.get("state")}
    return {k: report[k] for k in keys if k in report}


def _documents(
    text: str | None,
    doc_id: str | None,
    title: str | None,
    metadata: dict[str, Any] | None,
    documents: list[dict[str, Any]] | None,
) -> list[Document]:
    out = []
    if text is not None:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out.append(Document(doc_id or f"note-{digest}", text, title, dict(metadata or {})))
    elif doc_id is not None or title is not None or metadata is not None:
        raise ToolError("`id`, `title` and `metadata` describe `text`: give `text` too (or use `documents`)")
    for i, item in enumerate(documents or []):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not isinstance(item.get("text"), str):
            raise ToolError(f"documents[{i}] needs a string 'id' and a string 'text'")
        unknown = sorted(set(item) - {"id", "text", "title", "metadata"})
        if unknown:
            raise ToolError(f"documents[{i}] has {', '.join(unknown)}: a document takes id, text, title, metadata")
        meta = item.get("metadata") or {}
        if not isinstance(meta, dict):
            raise ToolError(f"documents[{i}].metadata must be an object of string keys, not {meta!r}")
        name = item.get("title")
        if name is not None and not isinstance(name, str):
            raise ToolError(f"documents[{i}].title must be a string, not {name!r}")
        out.append(Document(item["id"], item["text"], name, dict(meta)))
    if not out:
        raise ToolError("give `text` to remember, or `documents`")
    return out
