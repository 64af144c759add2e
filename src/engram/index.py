"""The in-memory index retrieval runs on, built from the records (and a snapshot's arrays when current)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.config import GraphConfig
from engram.graph.build import GraphTables, assemble_adjacency, build_tables, synonym_edges
from engram.graph.ppr import walk_operator
from engram.store.records import ExtractionRow, PassageRow
from engram.store.snapshot import Snapshot
from engram.types import Triple

Vectors = npt.NDArray[np.float32]
# (role, texts) -> vectors, through the embedding cache
EmbedFn = Callable[[str, Sequence[str]], Vectors]


def passage_text(row: PassageRow) -> str:
    """What is embedded for a passage: its title line, then its text."""
    return f"{row.title}\n{row.text}" if row.title else row.text


def fact_text(fact: Triple) -> str:
    return " ".join(fact)


@dataclass
class GraphIndex:
    passages: list[PassageRow]
    passage_vectors: Vectors
    tables: GraphTables
    phrase_vectors: Vectors
    fact_vectors: Vectors
    synonyms: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]
    adjacency: sp.csr_matrix
    operator: sp.csr_matrix
    phrase_passage_counts: npt.NDArray[np.float64]
    pending: int
    failed: int

    @property
    def n_phrases(self) -> int:
        return len(self.tables.phrases)

    def phrases_of(self, passage_id: str) -> list[str]:
        """The phrase nodes linked to a passage by context edges (empty for unknown or pending passages)."""
        rows = [i for i, p in enumerate(self.passages) if p.id == passage_id]
        if not rows:
            return []
        linked = self.tables.context[self.tables.context[:, 0] == rows[0], 1]
        return [self.tables.phrases[i] for i in linked.tolist()]

    def snapshot(self) -> Snapshot:
        return Snapshot(
            passage_ids=[p.id for p in self.passages],
            phrases=self.tables.phrases,
            facts=self.tables.facts,
            arrays={
                "passages": self.passage_vectors,
                "phrases": self.phrase_vectors,
                "facts": self.fact_vectors,
                "synonyms": self.synonyms[0],
                "synonym_weights": self.synonyms[1],
            },
        )

    def stats(self) -> dict[str, int]:
        return {
            "passages": len(self.passages),
            "phrases": self.n_phrases,
            "facts": len(self.tables.facts),
            "relation_edges": len(self.tables.relation),
            "synonym_edges": len(self.synonyms[0]),
            "context_edges": len(self.tables.context),
            "edges": len(self.tables.relation) + len(self.synonyms[0]) + len(self.tables.context),
            "pending": self.pending,
            "failed": self.failed,
        }


class _Clock:
    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        if self.timings is not None:
            self.timings[name] = self.timings.get(name, 0.0) + now - self.last
        self.last = now


def _matches(snapshot: Snapshot, passages: list[PassageRow], tables: GraphTables) -> bool:
    return (
        snapshot.passage_ids == [p.id for p in passages]
        and snapshot.phrases == tables.phrases
        and snapshot.facts == tables.facts
    )


def build_index(
    passages: list[PassageRow],
    extractions: dict[str, ExtractionRow],
    embed: EmbedFn,
    config: GraphConfig,
    snapshot: Snapshot | None = None,
    timings: dict[str, float] | None = None,
) -> GraphIndex:
    """Derive the graph from records. Arrays come from `snapshot` when it matches the records exactly,
    otherwise vectors come from `embed` (cached) and synonym edges are recomputed. Seconds spent per step are
    added to `timings` ("tables", "synonyms", "graph"; embedding time is the caller's to measure)."""
    clock = _Clock(timings)
    done = [extractions.get(p.content_hash) for p in passages]
    triples = [row.triples if row is not None and row.status == "done" else [] for row in done]
    tables = build_tables(triples)
    clock.lap("tables")
    if snapshot is not None and _matches(snapshot, passages, tables):
        arrays = snapshot.arrays
        passage_vectors, phrase_vectors, fact_vectors = arrays["passages"], arrays["phrases"], arrays["facts"]
        synonyms = (np.asarray(arrays["synonyms"]), np.asarray(arrays["synonym_weights"]))
    else:
        passage_vectors = embed("passage", [passage_text(p) for p in passages])
        phrase_vectors = embed("phrase", tables.phrases)
        fact_vectors = embed("fact", [fact_text(f) for f in tables.facts])
        clock.lap("embed")
        synonyms = synonym_edges(phrase_vectors, config.synonym_threshold, config.synonym_top_k)
        clock.lap("synonyms")
    adjacency = assemble_adjacency(tables, len(passages), synonyms, config.context_weight)
    counts = np.bincount(tables.context[:, 1], minlength=len(tables.phrases)).astype(np.float64)
    operator = walk_operator(adjacency)
    clock.lap("graph")
    return GraphIndex(
        passages=passages,
        passage_vectors=passage_vectors,
        tables=tables,
        phrase_vectors=phrase_vectors,
        fact_vectors=fact_vectors,
        synonyms=synonyms,
        adjacency=adjacency,
        operator=operator,
        phrase_passage_counts=counts,
        pending=sum(1 for row in done if row is None),
        failed=sum(1 for row in done if row is not None and row.status == "failed"),
    )
