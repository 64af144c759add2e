"""The embedder contract: one method, one return type."""

from __future__ import annotations

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


def normalize_rows(matrix: npt.NDArray[Any]) -> Vectors:
    """L2-normalise rows; zero rows stay zero."""
    out = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: Vectors = (out / norms).astype(np.float32, copy=False)
    return normalised
