"""The rooms a `Memory` wires (a directory's records, its live index, the writer), built through their public
constructors, with the writes and reads index tests run. For tests of the index room that look at the live
index's own state (`LiveIndex.load()`: vector rows, the ANN loader, saved walks, fact codes), which `Memory`
keeps to itself; they write and retrieve exactly as a `Memory` does, so a `Memory` is their oracle and theirs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from engram import Document, IndexReport, MemoryConfig, Retrieval
from engram.embed.base import Embedder, model_key
from engram.extract.importers import as_extraction_set
from engram.index.live.live_index import LiveIndex
from engram.index.live.retry import retry_conflicts
from engram.index.live.writer import Writer
from engram.index.view.graph_snapshot import graph_snapshot
from engram.ingest.prepare import document_list, id_list
from engram.retrieve.context import RetrievalContext, embed_fn
from engram.retrieve.run import retrieve, warm_view
from engram.store.base import Store
from engram.store.manifest import open_directory
from engram.store.records import RecordStore
from engram.types import GraphSnapshot

DB_NAME = "engram.sqlite"  # as engram.memory names a directory's records


class Rooms:
    """A memory (a directory, or a PostgreSQL URL) opened without the `Memory` facade (no LLM, no peer
    methods): `store`, `live` and `writer` are the objects a `Memory` there would make."""

    def __init__(self, where: Path | str, embedder: Embedder, config: MemoryConfig | None = None) -> None:
        self.config = config or MemoryConfig()
        self.embedder = embedder
        self.store: Store
        if isinstance(where, str):  # a PostgreSQL URL: no directory
            from engram.store.postgres import PostgresStore

            self.store, root = PostgresStore(where, embedder.identity), None
        else:
            open_directory(where, embedder.identity, True, where / DB_NAME)
            self.store, root = RecordStore(where / DB_NAME), where
        warm = warm_view if self.config.retrieve.query_links else None
        self.live = LiveIndex(root, self.store, embedder, model_key(embedder), self.config.graph, warm=warm)
        self.writer = Writer(self.store, self.live, self.config.chunk, lambda: None)

    def index(self, documents: Iterable[str | Document], extractions: Any = None) -> IndexReport:
        docs, found = document_list(documents), as_extraction_set(extractions)
        return retry_conflicts(lambda: self.writer.index(docs, found, None, None, None), turn=self.live.turn)

    def update(self, document: Document, extractions: Any = None) -> IndexReport:
        found = as_extraction_set(extractions)
        return retry_conflicts(lambda: self.writer.update(document, found), turn=self.live.turn)

    def delete(self, document_ids: Iterable[str] | str) -> IndexReport:
        ids = id_list(document_ids)
        return retry_conflicts(lambda: self.writer.delete(ids), turn=self.live.turn)

    def context(self) -> RetrievalContext:
        view = self.live.current()
        embed = embed_fn(self.embedder)
        return RetrievalContext(view, embed, self.embedder.dim, self.config.retrieve, partial(self.live.bm25, view))

    def retrieve(self, queries: str | Sequence[str], top_k: int = 5, method: str = "hipporag2") -> list[Retrieval]:
        return retrieve(self.context(), [queries] if isinstance(queries, str) else list(queries), top_k, method)

    def graph(self) -> GraphSnapshot:
        return graph_snapshot(self.live.current(), self.config.graph.context_weight)

    def documents(self) -> dict[str, dict[str, Any]]:
        return self.store.document_metadata()

    def stats(self) -> dict[str, int]:
        return self.live.stats()

    def flush(self) -> None:
        self.live.flush()

    def close(self) -> None:
        try:
            self.live.flush()
        finally:
            self.store.close()

    def __enter__(self) -> Rooms:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
