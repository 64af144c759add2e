"""BM25 baseline over passage texts (bm25s)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from engram.errors import MissingDependencyError


class BM25Index:
    def __init__(self, texts: Sequence[str]) -> None:
        try:
            import bm25s
        except ImportError as exc:  # pragma: no cover - bm25s is a core dependency
            raise MissingDependencyError("BM25 needs bm25s: pip install bm25s") from exc
        self._bm25s = bm25s
        self.size = len(texts)
        self._model = bm25s.BM25()
        if texts:
            self._model.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """One BM25 score per passage, in index order."""
        if self.size == 0:
            return np.zeros(0)
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        return np.asarray(self._model.get_scores(tokens), dtype=np.float64)
