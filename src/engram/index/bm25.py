"""BM25 baseline over passage texts (bm25s)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from engram.errors import MissingDependencyError


class BM25Index:
    def __init__(self, texts: Sequence[str], alive: npt.ArrayLike | None = None) -> None:
        """Index the texts whose `alive` flag is set (all by default); dead rows score -inf."""
        try:
            import bm25s
        except ImportError as exc:  # pragma: no cover - bm25s is a core dependency
            raise MissingDependencyError("BM25 needs bm25s: pip install bm25s") from exc
        self._bm25s = bm25s
        self.size = len(texts)
        mask = np.ones(len(texts), dtype=bool) if alive is None else np.asarray(alive, dtype=bool)
        self._rows = np.flatnonzero(mask)
        self._model = bm25s.BM25()
        if len(self._rows):
            chosen = [texts[i] for i in self._rows.tolist()]
            self._model.index(bm25s.tokenize(chosen, stopwords="en", show_progress=False), show_progress=False)

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """One BM25 score per passage, in index order."""
        out = np.full(self.size, -np.inf)
        if len(self._rows) == 0:
            return out
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        if not tokens:  # only stopwords, one-letter words or symbols: no term matches any passage
            out[self._rows] = 0.0
            return out
        out[self._rows] = np.asarray(self._model.get_scores(tokens), dtype=np.float64)
        return out
