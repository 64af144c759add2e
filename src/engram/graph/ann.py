"""Approximate nearest neighbours over a matrix whose rows only grow (optional: `pip install 'engram[ann]'`).

An `AnnIndex` holds rows of a vector table (phrases, facts or passages: rows never move, dead rows stay and are
filtered by the caller) in a faiss HNSW graph over inner products of the unit vectors (cosines), with a label (the
table row) per entry. bench/bench_ann.py chose faiss's HNSW (efConstruction 80, efSearch 32) over hnswlib and
usearch: on 50k hash-embedded phrases it was the fastest setting whose recall of synonym pairs reached 0.99 (0.994).
Each entry keeps 24 links per layer (`M`, 48 in the bottom one): with 16, engram's synonym edges over 540k phrases
of a 100k-passage memory, added in three batches, had recall 0.986 against exact search; with 24, 0.995
(bench/README.md). A graph saved with another M grows with its own. The graph keeps half-precision copies of the
vectors (`IndexHNSWSQ`, `QT_fp16`; at 200k phrases half the memory of float32 copies and a faster build at the same
recall, bench/README.md): a stored component is off by at most 2^-11 of itself (half precision's unit roundoff), so
for unit vectors an approximate cosine is within 2^-11 (4.9e-4) of the exact one, inside `SLACK`. A graph saved with
float32 copies (`IndexHNSWFlat`, before) is still read, and the entries added to it stay float32. A graph is
written without its vectors (faiss's `IO_FLAG_SKIP_STORAGE`: the links alone, a quarter of the bytes at 384
dimensions): the vector table it indexes already holds them on disk, so `load` fills the copies from that table,
in RAM, through a `vectors` callable (graphs saved with their vectors, before, still read their own). `neighbours`
finds, for query vectors, every row whose approximate cosine is within `slack` of a threshold, widening the search
until the last hit falls below it, so the caller can keep the candidates whose exact cosine passes: with the exact
neighbours found, the result is the exact one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram import optional
from engram.errors import MissingDependencyError

Vectors = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]
INSTALL = "approximate search needs the ann extra: pip install 'engram[ann]' (faiss-cpu)"
SLACK = 1e-3  # the half-precision graph's inner products differ from the exact cosine by at most 4.9e-4
M = 24  # links per entry and layer of a new graph
FILL_ROWS = 65_536  # rows read from the vector table at once when a loaded graph's copies are filled
VectorsOf = Callable[[IntArray], Vectors]  # the float32 vectors of table rows


def available() -> bool:
    """Whether faiss is installed (found, not imported)."""
    return optional.installed("faiss")


def library() -> Any:
    """The faiss module (MissingDependencyError naming the extra when it is not installed)."""
    try:
        import faiss
    except ImportError as exc:
        raise MissingDependencyError(INSTALL) from exc
    return faiss


class AnnIndex:
    """HNSW over rows of a growing table; entry i of the index is table row `labels[i]` (-1: dropped).

    A loaded index (`load`) keeps the saved graph memory-mapped and read-only (`base`: faiss reads none of its
    vectors into RAM, and a mapped graph cannot grow); entries added after it go to a second graph in RAM (its
    entries follow the base's), and searches merge the two. `write_added` saves that second graph alone,
    `write` both as one."""

    def __init__(self, dim: int, m: int = M, ef_construction: int = 80, ef_search: int = 32) -> None:
        faiss = library()
        self.dim = dim
        self.ef_search = ef_search
        self._index = _graph(faiss, dim, m, ef_construction)  # the entries added in RAM
        self._base: Any = None  # the mapped graph of a loaded index (its entries come first), or None
        self._base_file: tuple[Path, tuple[int, int, int]] | None = None  # its path and (inode, size, mtime)
        self.base_checksum: str | None = None  # the base file's checksum in its manifest (set by its cache)
        self.labels: IntArray = np.zeros(0, dtype=np.int64)
        # rows that a search for their own vector did not return: the graph's neighbour pruning cuts a few off
        # in groups of near copies, and no search reaches them however wide (bench/README.md); callers compare
        # them exactly. Noted by callers as they search; saved with the index by its cache (index.saved.ann_cache)
        self.lost: set[int] = set()
        # a graph of the lost rows alone (in RAM, built by the synonym search when a large batch needs it, never
        # saved): a lost row, which no search of this graph reaches, is mostly reached by a search of that one
        self.lost_graph: AnnIndex | None = None
        self._lost_rows: IntArray = np.zeros(0, dtype=np.int64)  # rows whose vectors `lost_vectors` keeps
        self._lost_vectors: Vectors = np.zeros((0, dim), dtype=np.float32)

    def lost_vectors(self, rows: IntArray, vectors: Callable[[IntArray], Vectors]) -> Vectors:
        """The vectors of `rows` (lost rows, sorted), each read through `vectors` once and then kept (a row's
        vector never changes): every new phrase is compared with the lost ones, and reading them afresh, spread
        over a memory-mapped matrix, would pull most of its pages in at every insert."""
        have = self._lost_rows
        if not np.array_equal(have, rows):
            at = np.minimum(np.searchsorted(have, rows), max(len(have) - 1, 0))
            known = have[at] == rows if len(have) else np.zeros(len(rows), dtype=bool)
            out = np.empty((len(rows), self.dim), dtype=np.float32)
            out[known] = self._lost_vectors[at[known]]
            if not known.all():
                out[~known] = vectors(rows[~known])
            self._lost_rows, self._lost_vectors = rows.copy(), out
        return self._lost_vectors

    @property
    def size(self) -> int:
        return int(np.count_nonzero(self.labels >= 0))

    @property
    def base_entries(self) -> int:
        """Entries in the mapped graph (0 when the index was not loaded)."""
        return 0 if self._base is None else int(self._base.ntotal)

    @property
    def added_entries(self) -> int:
        """Entries in the graph in RAM (all of them when the index was not loaded)."""
        return int(self._index.ntotal)

    @property
    def base_path(self) -> Path | None:
        """The file the mapped graph was read from (None when the index was not loaded)."""
        return None if self._base_file is None else self._base_file[0]

    def base_on_disk(self) -> bool:
        """Whether the mapped base's file is still the one mapped (not replaced or changed since)."""
        if self._base_file is None:
            return False
        try:
            return _identity(self._base_file[0]) == self._base_file[1]
        except OSError:
            return False

    def add(self, rows: IntArray, vectors: Vectors) -> None:
        if len(rows):
            self._index.add(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim))
            self.labels = np.concatenate([self.labels, np.asarray(rows, dtype=np.int64)])

    def rows(self) -> IntArray:
        out: IntArray = self.labels[self.labels >= 0]
        return out

    def relabel(self, labels: IntArray) -> None:
        """New labels for every entry, in entry order (-1 drops an entry from the results)."""
        total = self.base_entries + self.added_entries
        if len(labels) != total:
            raise ValueError(f"{len(labels)} labels for {total} entries")
        self.labels = np.asarray(labels, dtype=np.int64)

    def search(self, queries: Vectors, k: int) -> tuple[FloatArray, IntArray]:
        """The `k` nearest entries of each query by inner product, best first: (cosines, rows), both (q, k);
        missing results and dropped entries are row -1 with cosine -inf."""
        q = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        total = self.base_entries + self.added_entries
        k = max(1, min(k, total))
        if total == 0 or not len(q):
            return np.full((len(q), k), -np.inf, np.float32), np.full((len(q), k), -1, np.int64)
        found: list[tuple[Any, Any]] = []
        for graph, offset in ((self._base, 0), (self._index, self.base_entries)):
            if graph is not None and graph.ntotal:
                graph.hnsw.efSearch = max(self.ef_search, k)
                sims, ids = graph.search(q, min(k, int(graph.ntotal)))
                found.append((sims, np.where(ids >= 0, ids + offset, -1)))
        sims, ids = (np.concatenate(parts, axis=1) for parts in zip(*found))
        if len(found) > 1:  # the k best of both graphs' lists
            best = np.argsort(-sims, axis=1, kind="stable")[:, :k]
            sims, ids = np.take_along_axis(sims, best, axis=1), np.take_along_axis(ids, best, axis=1)
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

    def write_added(self, path: Path) -> None:
        """Write the graph in RAM alone (the entries added since `load`) to `path`, atomically."""
        _write(self._index, path)

    def write(self, path: Path) -> None:
        """Write every entry as one graph to `path`, atomically. With a mapped base, the base is read into RAM
        (from its file when that is still the one mapped, else from the mapping), the added entries are
        inserted into it, and the result is written; this index then maps the written file as its base."""
        faiss = library()
        if self._base is None:
            _write(self._index, path)
            return
        if self._base_file is not None and self.base_on_disk():
            whole = faiss.read_index(str(self._base_file[0]))
            if whole.storage is None:  # saved without its vectors: a copy of those the mapped base was given
                _attach(whole, faiss.clone_index(self._base.storage))
        else:
            whole = faiss.deserialize_index(faiss.serialize_index(self._base))
        added = int(self._index.ntotal)
        if added:
            whole.add(faiss.downcast_index(self._index.storage).reconstruct_n(0, added))
        _write(whole, path)
        self._map(path)
        graph = self._index if self._base is None else self._base
        if graph.storage is None:  # the written file holds the links alone: the vectors move over from `whole`
            storage, whole.own_fields = whole.storage, False
            _attach(graph, storage)
        del whole

    def _map(self, path: Path) -> None:
        """Take the graph saved at `path` as the base (mapped), with no entries in RAM."""
        faiss = library()
        flag = getattr(faiss, "IO_FLAG_MMAP_IFC", None)
        base = faiss.read_index(str(path), flag) if flag is not None else faiss.read_index(str(path))
        if int(base.d) != self.dim or not hasattr(base, "hnsw"):
            raise ValueError(f"ANN index {path} is not an HNSW index of dimension {self.dim}")
        if flag is None:  # a faiss without mapped reading: the loaded graph is the one in RAM
            self._base, self._base_file, self._index = None, None, base
            return
        full = isinstance(base, faiss.IndexHNSWFlat)  # saved before the half-precision graph: grows alike
        fresh = _graph(faiss, self.dim, base.hnsw.nb_neighbors(1), base.hnsw.efConstruction, full)
        self._base, self._base_file, self._index = base, (path, _identity(path)), fresh

    @classmethod
    def load(
        cls,
        path: Path,
        dim: int,
        added: Path | None = None,
        vectors: VectorsOf | None = None,
        labels: IntArray | None = None,
    ) -> AnnIndex:
        """An index saved by `write`, mapped as the base (and the graph `write_added` saved, read into RAM to
        grow).

        Parameters
        ----------
        path, added
            The files `write` and `write_added` wrote.
        dim
            The vectors' dimension.
        vectors
            The float32 vectors of table rows: a graph saved without its vectors (every graph `write` writes)
            gets its copies from it, in RAM; an entry labelled -1 gets a zero vector (it is never returned,
            and only a search passing through it could change).
        labels
            The table row of each entry (`relabel`); 0..n-1 by default.

        Raises
        ------
        ValueError
            When a file is unreadable, of another dimension, or saved without its vectors and no `vectors`
            is given.
        """
        faiss = library()
        out = cls(dim)
        try:
            out._map(path)
            if added is not None:
                more = faiss.read_index(str(added))
                if int(more.d) != dim or not hasattr(more, "hnsw") or out._base is None:
                    raise ValueError(f"ANN index {added} does not extend {path}")
                out._index = more
        except (RuntimeError, OSError) as exc:
            raise ValueError(f"unreadable ANN index {path}: {exc}") from exc
        out.relabel(np.arange(out.base_entries + out.added_entries, dtype=np.int64) if labels is None else labels)
        first = 0
        for graph in (out._base, out._index):
            if graph is None:
                continue
            count = int(graph.ntotal)
            if graph.storage is None:
                if vectors is None:
                    raise ValueError(f"ANN index {path} was saved without its vectors: load it with `vectors`")
                _attach(graph, _filled(faiss, graph, out.labels[first : first + count], vectors, dim))
            first += count
        return out


def _graph(faiss: Any, dim: int, m: int, ef_construction: int, full: bool = False) -> Any:
    """An empty HNSW graph over inner products, keeping half-precision copies of its vectors (float32 ones
    with `full`, as graphs saved before them)."""
    if full:
        graph = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
    else:
        graph = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_fp16, m, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = ef_construction
    return graph


def _filled(faiss: Any, graph: Any, labels: IntArray, vectors: VectorsOf, dim: int) -> Any:
    """The vector copies `graph` (saved without them) searches: the rows `labels` of the table `vectors`
    reads, in `FILL_ROWS` blocks, encoded by faiss as `graph` encodes what it adds (zeros for label -1)."""
    if isinstance(graph, faiss.IndexHNSWFlat):
        storage = faiss.IndexFlatIP(dim)
    else:
        storage = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    for start in range(0, len(labels), FILL_ROWS):
        part = labels[start : start + FILL_ROWS]
        block = np.zeros((len(part), dim), dtype=np.float32)
        live = part >= 0
        if live.any():
            block[live] = vectors(part[live])
        storage.add(block)
    return storage


def _attach(graph: Any, storage: Any) -> None:
    """Make `storage` the vector copies of `graph`, owned by it from now on (freed with it, not by Python)."""
    graph.storage = storage
    storage.this.disown()
    graph.own_fields = True


def _identity(path: Path) -> tuple[int, int, int]:
    status = path.stat()
    return status.st_ino, status.st_size, status.st_mtime_ns


def _write(index: Any, path: Path) -> None:
    """Write the graph's links alone (not its vector copies: `load` fills them) to `path`, atomically."""
    faiss = library()
    tmp = path.with_name(f".{path.name}.tmp")
    faiss.write_index(index, str(tmp), faiss.IO_FLAG_SKIP_STORAGE)
    os.replace(tmp, path)
