"""What the server does, over the public `engram.Memory` API; REST routes and MCP tools are thin layers on it.

Every method blocks (callers run them on worker threads). Writes hold the memory's writer lock; a write that
will call an LLM (the memory has one configured) runs as a job, the others answer at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engram.memory import Memory
from engram.server.errors import ApiError, bad_input, not_found
from engram.server.jobs import Job, Jobs, Progress
from engram.server.registry import Registry
from engram.server.views import answer_json, page_of, report_json, retrieval_json
from engram.text import clean_text
from engram.types import Document, IndexReport

Extractions = list[dict[str, Any]] | None


@dataclass
class WriteResult:
    """A write's outcome: `report` when it ran at once, `job` when it runs (or ran) in the background."""

    report: dict[str, Any] | None = None
    job: Job | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.job is not None:
            out["job"] = self.job.as_json()
        report = self.report if self.report is not None else (self.job.result if self.job else None)
        if report is not None:
            out["report"] = report
        return out


class Service:
    def __init__(self, registry: Registry, jobs: Jobs, wait_timeout: float = 600.0) -> None:
        self.registry, self.jobs, self.wait_timeout = registry, jobs, wait_timeout

    # reads ----------------------------------------------------------------------------------------------
    def memory(self, name: str) -> Memory:
        return self.registry.get(name).memory

    def stats(self, name: str) -> dict[str, Any]:
        """The memory's stats, and whether it has an LLM to answer with (the web page disables answering)."""
        memory = self.memory(name)
        return {"name": name, "stats": memory.stats(), "llm_configured": memory.llm is not None}

    def documents(self, name: str, prefix: str = "", limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        if not 1 <= limit <= 1000:
            raise bad_input("limit must be between 1 and 1000")
        stored = self.memory(name).documents()
        page, next_cursor, total = page_of(list(stored), prefix, limit, cursor)
        return {
            "documents": [{"id": i, "metadata": stored[i]} for i in page],
            "next_cursor": next_cursor,
            "total": total,
        }

    def retrieve(self, name: str, queries: Sequence[str], top_k: int = 5, method: str = "hipporag2") -> list[Any]:
        results = self.memory(name).retrieve(list(queries), top_k=top_k, method=method)
        return [retrieval_json(r, method) for r in results]

    def answer(self, name: str, queries: Sequence[str], top_k: int = 5, method: str = "hipporag2") -> list[Any]:
        return [answer_json(a) for a in self.memory(name).answer(list(queries), top_k=top_k, method=method)]

    def graph(self, name: str, around: Sequence[str], hops: int = 1, limit: int = 60) -> dict[str, Any]:
        if not around:
            raise bad_input("around: give a phrase or a passage id")
        if hops not in (1, 2):
            raise bad_input("hops must be 1 or 2")
        if not 1 <= limit <= 500:
            raise bad_input("limit must be between 1 and 500")
        found = self.memory(name).neighbourhood(list(around), hops=hops, limit=limit)
        if not found.nodes:
            raise not_found(f"nothing in memory {name!r} matches {', '.join(map(repr, around))}")
        return {
            "nodes": [vars(n) for n in found.nodes],
            "edges": [vars(e) for e in found.edges],
            "truncated": found.truncated,
        }

    def job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise not_found(f"no job {job_id!r} (jobs are kept while the server runs)")
        return job

    def wait(self, job: Job, timeout: float) -> Job:
        job.done_event.wait(timeout)
        return job

    # writes ---------------------------------------------------------------------------------------------
    def add(self, name: str, documents: list[Document], extractions: Extractions, wait: bool = False) -> WriteResult:
        if not documents:
            raise bad_input("documents: give at least one document")
        ids = [d.id for d in documents]
        if len(set(ids)) != len(ids):
            raise bad_input("documents: ids must be unique within a request")

        def work(memory: Memory, progress: Progress | None) -> IndexReport:
            return memory.index(documents, extractions=extractions, progress=progress)

        return self._write(name, "index", work, wait)

    def update(self, name: str, document: Document, extractions: Extractions, wait: bool = False) -> WriteResult:
        if not clean_text(document.text).strip():  # refused before a memory of that name is created
            raise bad_input(f"document {document.id!r} is empty: delete the document to remove it")
        return self._write(name, "update", lambda memory, _: memory.update(document, extractions=extractions), wait)

    def delete(self, name: str, doc_id: str) -> WriteResult:
        handle = self.registry.get(name)
        with handle.writing() as memory:
            report = memory.delete([doc_id])
        if doc_id in report.skipped:
            raise not_found(f"no document {doc_id!r} in memory {name!r}")
        return WriteResult(report=report_json(report))

    def _write(
        self, name: str, kind: str, work: Callable[[Memory, Progress | None], IndexReport], wait: bool
    ) -> WriteResult:
        handle = self.registry.get(name, create=True)
        if handle.memory.llm is None:
            with handle.writing() as memory:
                return WriteResult(report=report_json(work(memory, None)))

        def job_work(progress: Progress) -> dict[str, Any]:
            with handle.writing() as memory:
                return report_json(work(memory, progress))

        job = self.jobs.submit(name, kind, job_work)
        if wait:
            self.wait(job, self.wait_timeout)
            if job.state == "failed" and job.error is not None:
                raise ApiError(int(job.error["status"]), str(job.error["type"]), str(job.error["message"]))
        return WriteResult(job=job)
