"""`Memory`: the facade that wires the store, embedder, LLM, graph and retrievers together."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from engram.config import MemoryConfig
from engram.embed.base import Embedder, Role, Vectors
from engram.errors import EngramError, InputError, LLMError, MemoryFormatError
from engram.extract.importers import ExtractionSet, load_extractions
from engram.index import GraphIndex, build_index, passage_text
from engram.ingest import prepare
from engram.llm.base import ChatModel
from engram.pipeline import apply_extractions, run_extraction, staged_writes
from engram.retrieve.bm25 import BM25Index
from engram.retrieve.run import answer_all, retrieve
from engram.settings import load_file_config, resolve_embedder
from engram.store.manifest import MANIFEST, check_embedder, read_manifest, write_manifest
from engram.store.records import PassageRow, RecordStore
from engram.store.snapshot import read_snapshot, remove_other_snapshots, write_snapshot
from engram.types import Answer, Document, Retrieval

# progress(stage, done, total): opt-in; the CLI turns it into progress bars
Progress = Callable[[str, int, int], None]
DB_NAME = "engram.sqlite"


@dataclass
class IndexReport:
    documents: int = 0
    passages: int = 0
    unchanged: int = 0
    imported: int = 0
    extracted: int = 0
    failed: int = 0
    pending: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    dropped_triples: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    # seconds per step: prepare, import, extract, embed, tables, synonyms, graph, commit
    timings: dict[str, float] = field(default_factory=dict)


class Memory:
    """A HippoRAG 2 memory stored in one directory.

    >>> with Memory("notes.engram") as memory:          # doctest: +SKIP
    ...     memory.index(["Alice founded Acme.", "Acme is based in Lyon."])
    ...     memory.retrieve("Where is Alice's company?")

    `embedder` defaults to all-MiniLM-L6-v2 (or $ENGRAM_EMBEDDER); `llm` is optional: without it passages are
    indexed as pending (found by dense and BM25 search only) and the recognition filter is skipped.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: Embedder | str | None = None,
        llm: ChatModel | None = None,
        config: MemoryConfig | None = None,
        create: bool = True,
    ) -> None:
        self.path = Path(path)
        self.embedder = resolve_embedder(embedder, Path(path))
        self.config = config or load_file_config(self.path)
        self.llm = llm
        self._lock = threading.RLock()
        self._open_directory(create)
        self._store = RecordStore(self.path / DB_NAME)
        self._model_key = hashlib.sha256(json.dumps(self.embedder.identity, sort_keys=True).encode()).hexdigest()[:16]
        self._index: GraphIndex | None = None
        self._generation = -1
        self._bm25: BM25Index | None = None

    def _open_directory(self, create: bool) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise InputError(f"{self.path} is a file; a memory is a directory")
        manifest_path = self.path / MANIFEST
        if manifest_path.exists():
            check_embedder(read_manifest(self.path), self.embedder.identity, self.path)
            return
        if self.path.exists() and any(p.name != "config.json" for p in self.path.iterdir()):
            raise MemoryFormatError(
                f"{self.path} is not empty and has no engram manifest: choose a new or empty directory"
            )
        if not create:
            raise MemoryFormatError(f"no memory at {self.path}: index documents into it first")
        self.path.mkdir(parents=True, exist_ok=True)
        write_manifest(self.path, self.embedder.identity)

    # lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # embedding through the cache ----------------------------------------------------------------------
    def _embed(self, role: str, texts: Sequence[str], progress: Progress | None = None) -> Vectors:
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        cached = self._store.cached_vectors(self._model_key, role)
        missing = sorted({h: t for h, t in zip(hashes, texts) if h not in cached}.items())
        if missing:
            total = len(missing)
            report = (lambda done: progress(f"embed {role}s", done, total)) if progress else None
            fresh = self.embedder.embed([t for _, t in missing], role=_role(role), progress=report)
            self._store.put_vectors(self._model_key, role, [h for h, _ in missing], fresh)
            cached.update((h, v.tobytes()) for (h, _), v in zip(missing, fresh))
        return np.stack([np.frombuffer(cached[h], dtype=np.float32) for h in hashes])

    def _embed_queries(self, queries: Sequence[str]) -> Vectors:
        return self.embedder.embed(list(queries), role="query")

    def _bm25_index(self) -> BM25Index:
        index = self._current()
        with self._lock:
            if self._bm25 is None:
                self._bm25 = BM25Index([passage_text(p) for p in index.passages])
            return self._bm25

    # the index ----------------------------------------------------------------------------------------
    def _current(self) -> GraphIndex:
        """The index of the latest committed generation (reloaded when another process committed one)."""
        with self._lock:
            generation = self._store.generation
            if self._index is None or generation != self._generation:
                self._index = self._load(generation)
                self._generation = generation
                self._bm25 = None
            return self._index

    def _load(self, generation: int) -> GraphIndex:
        passages = self._store.passages()
        snapshot = read_snapshot(self.path, generation)
        index = build_index(passages, self._store.extractions(), self._embed, self.config.graph, snapshot)
        if snapshot is None and passages:
            write_snapshot(self.path, generation, index.snapshot())
        return index

    def _commit(
        self,
        staged: Sequence[PassageRow],
        writes: Callable[[sqlite3.Connection], None],
        progress: Progress | None,
        timings: dict[str, float] | None = None,
    ) -> GraphIndex:
        """Build the next generation from the records as they will be (stored + `staged` passages), write its
        snapshot, then run `writes` and set the generation number in one transaction."""
        base = self._store.generation
        passages = sorted([*self._store.passages(), *staged], key=lambda p: p.id)
        embed = (lambda role, texts: self._embed(role, texts, progress)) if progress else self._embed
        index = build_index(passages, self._store.extractions(), embed, self.config.graph, timings=timings)
        start = time.perf_counter()
        write_snapshot(self.path, base + 1, index.snapshot())
        with self._store.transaction() as db:
            if self._store.generation != base:
                raise EngramError("the memory was changed by another process meanwhile: run the command again")
            writes(db)
            self._store.set_meta(db, "generation", str(base + 1))
        remove_other_snapshots(self.path, base + 1)
        if timings is not None:
            timings["commit"] = time.perf_counter() - start
        with self._lock:
            self._index, self._generation, self._bm25 = index, base + 1, None
        return index

    # public API ---------------------------------------------------------------------------------------
    def index(
        self,
        documents: Iterable[str | Document],
        *,
        extractions: ExtractionSet | str | Path | Iterable[dict[str, Any]] | None = None,
        progress: Progress | None = None,
    ) -> IndexReport:
        """Add documents. Passages get their extraction from `extractions` (engram/shared JSONL or HippoRAG
        OpenIE JSON, a path or loaded), else from the LLM when one is configured, else stay pending."""
        start = time.perf_counter()
        prepared = prepare(documents, self._store.document_hashes(), self._store.passage_hashes(), self.config.chunk)
        report = IndexReport(skipped=dict(prepared.skipped), unchanged=prepared.unchanged)
        report.timings["prepare"] = time.perf_counter() - start
        if not prepared.documents:
            report.stats = self._current().stats()
            report.pending = report.stats["pending"]
            return report
        start = time.perf_counter()
        found = _as_extraction_set(extractions)
        report.imported = apply_extractions(self._store, prepared.passages, found)
        report.timings["import"] = time.perf_counter() - start
        start = time.perf_counter()
        report.extracted, report.failed = self._run_llm(prepared.passages, progress)
        report.timings["extract"] = time.perf_counter() - start
        writes = staged_writes(self._store, prepared)
        index = self._commit(prepared.passages, writes, progress, report.timings)
        report.documents, report.passages = len(prepared.documents), len(prepared.passages)
        report.stats = index.stats()
        report.pending, report.dropped_triples = report.stats["pending"], index.tables.dropped
        return report

    def extract(self, progress: Progress | None = None) -> IndexReport:
        """Run the LLM on pending and failed passages, then rebuild the graph with their triples."""
        if self.llm is None:
            raise LLMError("no LLM configured: set ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL (or pass llm=)")
        index = self._current()
        done = {h for h, row in self._store.extractions().items() if row.status == "done"}
        todo = [p for p in index.passages if p.content_hash not in done]
        report = IndexReport()
        report.extracted, report.failed = self._run_llm(todo, progress)
        if report.extracted:
            index = self._commit([], lambda db: None, progress)
        report.stats = index.stats()
        report.pending = report.stats["pending"]
        return report

    def _run_llm(self, passages: Sequence[Any], progress: Progress | None) -> tuple[int, int]:
        if self.llm is None:
            return 0, 0
        return run_extraction(self._store, self.llm, passages, progress)

    def stats(self) -> dict[str, Any]:
        index = self._current()
        return {
            **index.stats(),
            "documents": self._store.counts()["documents"],
            "generation": self._generation,
            "embedder": self.embedder.identity,
        }

    def phrases_of(self, passage_id: str) -> list[str]:
        """The phrases a passage is linked to in the graph (to explain why it was retrieved)."""
        return self._current().phrases_of(passage_id)

    def retrieve(self, queries: str | Sequence[str], top_k: int = 5, method: str = "hipporag2") -> list[Retrieval]:
        """Ranked passages for each query, as a list of `Retrieval` (one per query, in order)."""
        return retrieve(self, _as_queries(queries), top_k, method)

    def answer(self, queries: str | Sequence[str], top_k: int = 5, method: str = "hipporag2") -> list[Answer]:
        """Retrieve, then read the top passages with the LLM; a list of `Answer`."""
        return answer_all(self, _as_queries(queries), top_k, method)


def _role(name: str) -> Role:
    roles: dict[str, Role] = {"query": "query", "passage": "passage", "fact": "fact", "phrase": "phrase"}
    return roles[name]


def _as_queries(queries: str | Sequence[str]) -> list[str]:
    items = [queries] if isinstance(queries, str) else list(queries)
    for q in items:
        if not isinstance(q, str) or not q.strip():
            raise InputError("queries must be non-empty strings")
    return items


def _as_extraction_set(value: ExtractionSet | str | Path | Iterable[dict[str, Any]] | None) -> ExtractionSet:
    if value is None:
        return ExtractionSet()
    if isinstance(value, ExtractionSet):
        return value
    if isinstance(value, (str, Path)):
        return load_extractions(value)
    out = ExtractionSet(source="import")
    for row in value:
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise InputError("each extraction needs an 'id' string, 'entities' and 'triples'")
        out.by_id[row["id"]] = {"entities": list(row.get("entities") or []), "triples": row.get("triples") or []}
    return out
