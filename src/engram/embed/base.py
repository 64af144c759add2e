"""The embedder contract: one method, one return type."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Role = Literal["query", "passage", "fact", "phrase"]
Vectors = npt.NDArray[np.float32]
Progress = Callable[[int], None]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 rows.

    `role` lets a model prepend its query instruction (queries) or treat documents differently; models
    without instructions ignore it. `identity` is recorded in a memory's manifest: a memory is only opened
    with an embedder of the same identity. `progress`, when given, is called with the number of texts done
    after each batch.
    """

    @property
    def identity(self) -> dict[str, Any]: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        ...


def model_key(embedder: Embedder) -> str:
    """The key a memory files this embedder's cached vectors under: a short hash of its `identity`, so vectors
    another model made are never read for this one.

    Parameters
    ----------
    embedder
        Any embedder.

    Returns
    -------
    str
        16 hex digits.
    """
    return hashlib.sha256(json.dumps(embedder.identity, sort_keys=True).encode()).hexdigest()[:16]


@runtime_checkable
class TokenLimited(Protocol):
    """An embedder that truncates its input: `max_tokens` is the longest input the model reads whole (special
    tokens included; None: no limit) and `count_tokens` counts each text as the model sees it. Optional:
    embedders without these members (the hash and OpenAI-compatible embedders) have no limit here."""

    @property
    def max_tokens(self) -> int | None: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


TokenCounter = Callable[[Sequence[str]], list[int]]


def token_limit(embedder: object) -> tuple[int, TokenCounter] | None:
    """(max tokens, counter) of an embedder that truncates its input, else None."""
    if not isinstance(embedder, TokenLimited):
        return None
    limit = embedder.max_tokens
    return None if limit is None else (limit, embedder.count_tokens)


def normalize_rows(matrix: npt.NDArray[Any]) -> Vectors:
    """L2-normalise rows; zero rows stay zero."""
    out = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: Vectors = (out / norms).astype(np.float32, copy=False)
    return normalised
