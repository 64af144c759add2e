"""Approximate nearest neighbours over a matrix whose rows only grow (optional: `pip install 'engram[ann]'`).

An `AnnIndex` holds rows of a vector table (phrases, facts or passages: rows never move, dead rows stay and
are filtered by the caller) in a faiss HNSW graph over inner products of the unit vectors (cosines), with a
label (the table row) per entry. bench/bench_ann.py chose faiss's `IndexHNSWFlat` (M 16, efConstruction 80,
efSearch 32) over hnswlib and usearch: on 50k hash-embedded phrases it was the fastest setting whose recall of
synonym pairs reached 0.99 (0.994). `neighbours` finds, for query vectors, every row whose approximate cosine is
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
INSTALL = "approximate search needs the ann extra: pip install 'engram[ann]' (faiss-cpu)"
SLACK = 1e-3  # float32 inner products differ from the exact float64 cosine by far less than this


def available() -> bool:
    """Whether faiss is installed (found, not imported)."""
    return importlib.util.find_spec("faiss") is not None


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise InputError(INSTALL) from exc
    return faiss


class AnnIndex:
    """HNSW over rows of a growing table; entry i of the index is table row `labels[i]` (-1: dropped)."""

    def __init__(self, dim: int, m: int = 16, ef_construction: int = 80, ef_search: int = 32) -> None:
        faiss = _faiss()
        self.dim = dim
        self.ef_search = ef_search
        self._index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efConstruction = ef_construction
        self.labels: IntArray = np.zeros(0, dtype=np.int64)
        # rows that a search for their own vector did not return: the graph's neighbour pruning cuts a few off
        # in groups of near copies, and no search reaches them however wide (bench/README.md); callers compare
        # them exactly. Noted by callers as they search, in this session only (not saved with the index)
        self.lost: set[int] = set()

    @property
    def size(self) -> int:
        return int(np.count_nonzero(self.labels >= 0))

    def add(self, rows: IntArray, vectors: Vectors) -> None:
        if len(rows):
            self._index.add(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim))
            self.labels = np.concatenate([self.labels, np.asarray(rows, dtype=np.int64)])

    def rows(self) -> IntArray:
        out: IntArray = self.labels[self.labels >= 0]
        return out

    def relabel(self, labels: IntArray) -> None:
        """New labels for every entry, in entry order (-1 drops an entry from the results)."""
        if len(labels) != self._index.ntotal:
            raise ValueError(f"{len(labels)} labels for {self._index.ntotal} entries")
        self.labels = np.asarray(labels, dtype=np.int64)

    def search(self, queries: Vectors, k: int) -> tuple[FloatArray, IntArray]:
        """The `k` nearest entries of each query by inner product, best first: (cosines, rows), both (q, k);
        missing results and dropped entries are row -1 with cosine -inf."""
        q = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        k = max(1, min(k, int(self._index.ntotal)))
        if self._index.ntotal == 0 or not len(q):
            return np.full((len(q), k), -np.inf, np.float32), np.full((len(q), k), -1, np.int64)
        self._index.hnsw.efSearch = max(self.ef_search, k)
        sims, ids = self._index.search(q, k)
        rows = np.where(ids >= 0, self.labels[np.maximum(ids, 0)], -1)
        sims = np.where(rows >= 0, sims, -np.inf).astype(np.float32)
        return sims, rows

    def neighbours(
        self, queries: Vectors, threshold: float, k: int, limit: int, slack: float = SLACK
    ) -> tuple[IntArray, IntArray]:
        """(query position, row) pairs whose approximate cosine is >= threshold - slack. Starts with `k`
        results per query and widens (x4) for queries whose k-th result still passes, up to `limit`."""
        out_q: list[IntArray] = [np.zeros(0, dtype=np.int64)]
        out_r: list[IntArray] = [np.zeros(0, dtype=np.int64)]
        todo = np.arange(len(queries), dtype=np.int64)
        total = int(self._index.ntotal)
        while len(todo):
            sims, rows = self.search(queries[todo], k)
            hit = (sims >= threshold - slack) & (rows >= 0)
            full = (sims[:, -1] >= threshold - slack) & (k < min(limit, total))
            done = ~full
            qi, col = np.nonzero(hit & done[:, None])
            out_q.append(todo[qi])
            out_r.append(rows[qi, col])
            todo, k = todo[full], k * 4
        return np.concatenate(out_q), np.concatenate(out_r)

    def save(self, path: Path) -> None:
        _faiss().write_index(self._index, str(path))

    @classmethod
    def load(cls, path: Path, dim: int) -> AnnIndex:
        """An index saved by `save`, its entries labelled 0..n-1 until `relabel` (ValueError when it is
        unreadable or of another dimension)."""
        faiss = _faiss()
        try:
            index = faiss.read_index(str(path))
        except (RuntimeError, OSError) as exc:
            raise ValueError(f"unreadable ANN index {path}: {exc}") from exc
        if int(index.d) != dim or not hasattr(index, "hnsw"):
            raise ValueError(f"ANN index {path} is not an HNSW index of dimension {dim}")
        out = cls(dim)
        out._index = index  # read_index gives the concrete class (a downcast wrapper would not own it)
        out.labels = np.arange(index.ntotal, dtype=np.int64)
        return out
