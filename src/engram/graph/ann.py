"""Approximate nearest neighbours over a matrix whose rows only grow (optional: `pip install 'engram[ann]'`).

An `AnnIndex` holds rows of a vector table (phrases, facts or passages: rows never move, dead rows stay and
are filtered by the caller), keyed by row, in a usearch HNSW graph with int8-quantised cosine, which bench/bench_ann.py
chose over faiss and hnswlib. `neighbours` finds, for query vectors, every row whose approximate cosine is
within `slack` of a threshold, widening the search until the last hit falls below it, so the caller can keep
the candidates whose exact cosine passes: with the exact neighbours found, the result is the exact one.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.errors import InputError

Vectors = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]
INSTALL = "approximate search needs the ann extra: pip install 'engram[ann]' (usearch)"
SLACK = 0.02  # int8 quantisation moves a cosine by well under this (bench/bench_ann.py)


def available() -> bool:
    """Whether usearch is installed (found, not imported: see `_index_class`)."""
    return importlib.util.find_spec("usearch") is not None


def _index_class() -> Any:
    # Loading usearch's compiled module before onnxruntime's makes the later onnxruntime import crash the
    # process (a native-library clash, seen with usearch 2.26 and onnxruntime 1.32; the other order is fine),
    # and the default embedder loads onnxruntime lazily: load it first when it is installed.
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime  # type: ignore[import-untyped]  # noqa: F401
    try:
        from usearch.index import Index
    except ImportError as exc:
        raise InputError(INSTALL) from exc
    return Index


class AnnIndex:
    """HNSW over rows of a growing table, keyed by row number."""

    def __init__(self, dim: int, connectivity: int = 16, expansion_add: int = 128, expansion_search: int = 64):
        self.dim = dim
        self.expansion_search = expansion_search
        self._index = _index_class()(
            ndim=dim,
            metric="cos",
            dtype="i8",
            connectivity=connectivity,
            expansion_add=expansion_add,
            expansion_search=expansion_search,
        )

    @property
    def size(self) -> int:
        return len(self._index)

    def add(self, rows: IntArray, vectors: Vectors) -> None:
        if len(rows):
            self._index.add(np.asarray(rows, dtype=np.uint64), np.ascontiguousarray(vectors, dtype=np.float32))

    def rows(self) -> IntArray:
        return np.asarray(self._index.keys, dtype=np.int64)

    def relabel(self, old: IntArray, new: IntArray) -> None:
        """Give the rows `old` the numbers `new` (a permutation of some rows: goes through free numbers)."""
        if len(old):
            parked = np.asarray(old, dtype=np.uint64) + np.uint64(1 << 48)
            self._index.rename(np.asarray(old, dtype=np.uint64), parked)
            self._index.rename(parked, np.asarray(new, dtype=np.uint64))

    def remove(self, rows: IntArray) -> None:
        if len(rows):
            self._index.remove(np.asarray(rows, dtype=np.uint64))

    def search(self, queries: Vectors, k: int) -> tuple[FloatArray, IntArray]:
        """The `k` nearest rows of each query by approximate cosine, best first: (cosines, rows), both (q, k);
        missing results are row -1 with cosine -inf."""
        q = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        k = max(1, min(k, self.size))
        if self.size == 0 or not len(q):
            return np.full((len(q), k), -np.inf, np.float32), np.full((len(q), k), -1, np.int64)
        self._index.expansion_search = max(self.expansion_search, k)
        found = self._index.search(q, k)
        keys = np.asarray(found.keys, dtype=np.uint64).reshape(len(q), -1)
        distances = np.asarray(found.distances, dtype=np.float32).reshape(len(q), -1)
        counts = np.asarray(found.counts).reshape(-1)
        valid = np.arange(keys.shape[1])[None, :] < counts[:, None]
        rows = np.where(valid, keys.astype(np.int64), -1)
        sims = np.where(valid, 1.0 - distances, -np.inf).astype(np.float32)
        return sims, rows

    def neighbours(
        self, queries: Vectors, threshold: float, k: int, limit: int, slack: float = SLACK
    ) -> tuple[IntArray, IntArray]:
        """(query position, row) pairs whose approximate cosine is >= threshold - slack. Starts with `k`
        results per query and widens (x4) for queries whose k-th result still passes, up to `limit`."""
        out_q: list[IntArray] = []
        out_r: list[IntArray] = []
        todo = np.arange(len(queries), dtype=np.int64)
        while len(todo):
            sims, rows = self.search(queries[todo], k)
            hit = (sims >= threshold - slack) & (rows >= 0)
            full = hit[:, -1] & (k < min(limit, self.size))
            done = ~full
            qi, col = np.nonzero(hit & done[:, None])
            out_q.append(todo[qi])
            out_r.append(rows[qi, col])
            todo, k = todo[full], k * 4
        return np.concatenate(out_q), np.concatenate(out_r)

    def save(self, path: Path) -> None:
        self._index.save(str(path))

    @classmethod
    def load(cls, path: Path, dim: int) -> AnnIndex:
        """An index saved by `save` (raises ValueError when it is unreadable or of another dimension)."""
        out = cls(dim)
        try:
            out._index.load(str(path))
        except (RuntimeError, OSError) as exc:
            raise ValueError(f"unreadable ANN index {path}: {exc}") from exc
        if int(out._index.ndim) != dim:
            raise ValueError(f"ANN index {path} has dimension {out._index.ndim}, not {dim}")
        return out
