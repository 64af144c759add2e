"""Errors as the server reports them: `{"error": {"type", "message"}}` with an HTTP status.

engram's own exceptions map to statuses here, in one place, for REST, jobs and MCP alike.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from engram.errors import (
    ConflictError,
    EmbedderMismatchError,
    EngramError,
    InputError,
    LLMError,
    MemoryFormatError,
    MissingDependencyError,
)


@dataclass
class ApiError(Exception):
    status: int
    type: str
    message: str

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": {"type": self.type, "message": self.message}}


def bad_input(message: str) -> ApiError:
    return ApiError(400, "bad_input", message)


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", what)


# most specific first: ConflictError and LLMError are EngramErrors too
_MAPPING: list[tuple[type[BaseException], int, str]] = [
    (ConflictError, 409, "conflict"),
    (LLMError, 503, "llm_unavailable"),
    (InputError, 400, "bad_input"),
    (EmbedderMismatchError, 409, "embedder_mismatch"),
    (MemoryFormatError, 409, "memory_format"),
    (MissingDependencyError, 500, "missing_dependency"),
    (EngramError, 400, "engram_error"),
]


def api_error(exc: BaseException) -> ApiError:
    """The status and type for an exception; unknown ones are 500 with a message that leaks nothing."""
    if isinstance(exc, ApiError):
        return exc
    for kind, status, name in _MAPPING:
        if isinstance(exc, kind):
            return ApiError(status, name, str(exc))
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return ApiError(409, "conflict", "another process is writing to this memory: retry the request")
    return ApiError(500, "internal", f"internal error ({type(exc).__name__}); the server log has the details")
