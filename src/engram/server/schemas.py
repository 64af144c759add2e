"""Request bodies of the REST API (pydantic models: they make the OpenAPI schema at /openapi.json)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engram.types import Document

MAX_ID = 1024  # characters of a document id (a POSTed one and a PUT path alike)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocumentIn(_Body):
    id: str = Field(min_length=1, max_length=MAX_ID, description="stable id chosen by the caller")
    text: str = Field(description="the document's text")
    title: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_document(self) -> Document:
        return Document(self.id, self.text, self.title, dict(self.metadata))


class AddDocuments(_Body):
    documents: list[DocumentIn] = Field(min_length=1)
    extractions: list[dict[str, Any]] | None = Field(
        default=None,
        description="precomputed extractions ({'id', 'entities', 'triples'} per passage, engram/shared JSONL rows)",
    )
    wait: bool = Field(
        default=False, strict=True, description="when the write runs as a job, answer once it has finished"
    )


class UpdateDocument(_Body):
    """The whole new document (PUT replaces: what is left out is cleared)."""

    text: str = Field(description="the new text")
    title: str | None = Field(default=None, description="the new title; left out: no title")
    metadata: dict[str, Any] = Field(default_factory=dict, description="the new metadata; left out: none")
    extractions: list[dict[str, Any]] | None = None
    wait: bool = Field(default=False, strict=True)


class RetrieveRequest(_Body):
    query: str | None = Field(default=None, description="one question")
    queries: list[str] | None = Field(default=None, description="several questions (one result each)")
    top_k: int = Field(default=5, ge=1, le=200, strict=True)  # strict: "5" and true are refused, not read as 5, 1
    method: str = Field(default="hipporag2", description="hipporag2, dense, bm25, hipporag1, ...")

    def all_queries(self) -> list[str]:
        """The questions asked: `query` or `queries` (the routes refuse a request with both)."""
        return [self.query] if self.query is not None else list(self.queries or [])


class AnswerRequest(RetrieveRequest):
    stream: bool = Field(
        default=False, strict=True, description="server-sent events: one 'answer' event per query, then 'done'"
    )
