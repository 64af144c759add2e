"""The read-only view retrieval runs on, derived from the live `IndexState` after every commit.

Rows are the state's rows: dead ones (deleted passages, facts and phrases no alive passage states) stay in the
arrays but have no edges, and the masks `passage_alive`, `fact_alive` and `phrase_alive` say which rows count.
Retrievers score through `dense_scores`, `fact_scores` and `phrase_scores`, which give dead rows the lowest
alive score of each query (so min-max normalisation and nearest-neighbour picks are as if they did not exist);
results never include dead passages (`retrieve.run` drops them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.graph.build import GraphTables, assemble_adjacency
from engram.graph.certify import TopK
from engram.graph.parallel import in_parallel
from engram.graph.ppr import SymmetricWalk, solve_pagerank
from engram.index.state.coded_rows import CodedRows, use_codes
from engram.index.state.index_state import IndexState, fact_text, passage_text
from engram.index.state.phrase_names import NameSnapshot
from engram.index.state.rows import RowView
from engram.index.state.saved_tables import Prefix
from engram.index.view.edges import Edges, derive_edges
from engram.store.records import PassageRow
from engram.types import Triple

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = ["GraphIndex", "fact_text", "passage_text", "view"]
T = TypeVar("T")


class ViewCache:
    """Values derived from one view on first use (its row-space adjacency, retrieval methods' lookup tables), by
    key. A value is built once, by whichever reader asks first; the others wait for it. One re-entrant lock, as
    a value may be built from another."""

    def __init__(self) -> None:
        self._values: dict[str, object] = {}
        self._lock = threading.RLock()

    def get(self, key: str, build: Callable[[], T]) -> T:
        """The value kept under `key`, built by `build` if there is none yet."""
        with self._lock:
            if key not in self._values:
                self._values[key] = build()
            return cast(T, self._values[key])


@dataclass
class GraphIndex:
    """One commit's graph, read-only: tables, alive masks, shared vector rows, the canonical walk, and the scores
    and Personalized PageRank retrieval reads from them (see the module docstring); `cache` keeps what readers
    derive from it."""

    passages: list[PassageRow]
    passage_alive: BoolArray
    passage_vectors: RowView
    tables: GraphTables
    phrase_alive: BoolArray
    phrase_vectors: RowView
    fact_alive: BoolArray
    fact_vectors: RowView
    synonyms: tuple[npt.NDArray[np.int64], FloatArray]
    context_weight: float
    phrase_passage_counts: FloatArray
    pending: int
    failed: int
    node_rows: npt.NDArray[np.int64]  # row-space node of each canonical node: sorted phrases, then passages
    walk: SymmetricWalk  # the walk over alive nodes in canonical order
    passage_rank: npt.NDArray[np.int64]  # canonical position of each row (dead rows after all alive ones)
    phrase_rank: npt.NDArray[np.int64]
    fact_rank: npt.NDArray[np.int64]
    names: NameSnapshot  # folded phrase names and per-word passage counts (engram.retrieve.links)
    patched: bool = False  # edge arrays patched from the previous view's (engram.index.view.edges)
    fact_codes: CodedRows | None = None  # scores the best and worst facts of `fact_scores(..., top)` (or None)
    cache: ViewCache = field(default_factory=ViewCache)  # what readers derive from it, once

    @property
    def adjacency(self) -> sp.csr_matrix:
        """The symmetric adjacency matrix in row space (derived on first use: retrieval walks the canonical
        graph, `walk`)."""
        return self.memo(
            "adjacency",
            lambda: assemble_adjacency(self.tables, len(self.passages), self.synonyms, self.context_weight),
        )

    def ppr(self, resets: npt.ArrayLike, damping: float, top: int | None = None) -> FloatArray:
        """Personalized PageRank with reset weights given in row space ((phrase rows + passage rows) x q, or
        a vector). It runs over the alive nodes in canonical order, so the result does not depend on the
        order in which documents were added; dead rows get 0. With `top`, the solve stops once the `top`
        passages with the most mass are certain, in order (`engram.graph.certify`): their order is the exact
        solution's, and every mass is within a certified bound of the exact one."""
        r = np.asarray(resets, dtype=np.float64)
        out = np.zeros_like(r)
        out[self.node_rows] = solve_pagerank(self.walk, self.canonical_reset(r), damping, top=self._top(top))
        return out

    def passage_ppr(self, resets: npt.ArrayLike, damping: float, top: int | None = None) -> FloatArray:
        """`ppr`'s masses of the passage rows alone (passage rows x q, or a vector): what a ranking reads, without
        a pass over the phrase rows' output."""
        r = np.asarray(resets, dtype=np.float64)
        if r.ndim == 2 and r.shape[1] == 1:  # one query: solved as a vector, read where its reset is not zero
            return self.passage_ppr(r[:, 0], damping, top)[:, None]
        reset, support = self._canonical(r)
        return self._passage_masses(reset, support, damping, top)

    def seeded_ppr(
        self, phrase_rows: IntArray, phrase_weights: FloatArray, passages: FloatArray, damping: float, top: int | None
    ) -> FloatArray:
        """`passage_ppr` of one reset given by its parts, `phrase_weights` at the (distinct) `phrase_rows` and
        `passages` at every passage row: the same masses, with no vector over every row to build and search."""
        reset, support = self._canonical_parts(phrase_rows, phrase_weights, passages)
        return self._passage_masses(reset, support, damping, top)

    def _passage_masses(
        self, reset: FloatArray, support: IntArray | None, damping: float, top: int | None
    ) -> FloatArray:
        """PageRank of a canonical `reset`, read at the passage rows."""
        solved = solve_pagerank(self.walk, reset, damping, top=self._top(top), support=support)
        start = self._canonical_phrases()
        out = np.zeros((len(self.passages), *reset.shape[1:]))
        out[self.node_rows[start:] - self.n_phrases] = solved[start:]
        return out

    def canonical_reset(self, resets: FloatArray) -> FloatArray:
        """`resets[node_rows]`, read where it can be non-zero: every alive passage row, and only the phrase rows
        a reset seeds (a few of them: no gather over every phrase)."""
        return self._canonical(resets)[0]

    def _canonical(self, resets: FloatArray) -> tuple[FloatArray, IntArray | None]:
        """`canonical_reset`, and for a vector the sorted canonical nodes outside which it is zero (the seeded
        phrases, then every passage): what PageRank's checks and push then read, instead of every node."""
        phrase_part = resets[: self.n_phrases]
        # a compare, then a pass over bools: several times faster than nonzero over the floats themselves
        seeded = np.flatnonzero(phrase_part != 0 if resets.ndim == 1 else phrase_part.any(axis=1))
        if resets.ndim == 1:
            return self._canonical_parts(seeded, resets[seeded], resets[self.n_phrases :])
        start = self._canonical_phrases()
        seeded = seeded[self.phrase_rank[seeded] < start]  # alive phrases (dead rows rank after every alive one)
        out = np.zeros((len(self.node_rows), *resets.shape[1:]))
        out[self.phrase_rank[seeded]] = resets[seeded]
        out[start:] = resets[self.node_rows[start:]]
        return out, None

    def _canonical_parts(
        self, phrase_rows: IntArray, phrase_weights: FloatArray, passages: FloatArray
    ) -> tuple[FloatArray, IntArray]:
        """The canonical reset of `phrase_weights` at the distinct `phrase_rows` and `passages` at every passage
        row, and the sorted canonical nodes outside which it is zero (its seeded alive phrases, every passage)."""
        start = self._canonical_phrases()
        at = self.phrase_rank[phrase_rows]
        kept = (at < start) & (phrase_weights != 0)  # alive phrases (dead rows rank after every alive one)
        reset = np.zeros(len(self.node_rows))
        reset[at[kept]] = phrase_weights[kept]
        reset[start:] = passages[self.node_rows[start:] - self.n_phrases]
        support = np.concatenate([np.sort(at[kept]), np.arange(start, len(self.node_rows))]).astype(np.int64)
        return reset, support

    def _canonical_phrases(self) -> int:
        """How many phrase nodes the walk has (the alive phrases, first in canonical order)."""
        return self.memo("canonical_phrases", lambda: int(np.count_nonzero(self.node_rows < self.n_phrases)))

    def _top(self, k: int | None) -> TopK | None:
        return None if k is None else TopK(self._canonical_phrases(), k)  # the passage nodes come last

    @property
    def n_phrases(self) -> int:
        return len(self.tables.phrases)

    def _scores(self, vectors: RowView, alive: BoolArray, query_vectors: npt.ArrayLike) -> FloatArray:
        """Cosines of the queries with every row, as (q, rows); dead rows get each query's lowest alive score.
        Each row's dot product is numpy's own loop over that row (`einsum`, not BLAS), which gives the same
        float at any row position and matrix size, so the scores are those of a memory built from scratch
        whatever the arrival order and deletions, straight from the shared vectors: no per-view copy in
        canonical order (BLAS rounds a row differently at another position or shape). One pass over the
        vectors per query, in row blocks on the machine's cores (engram.graph.parallel)."""
        q = np.asarray(query_vectors, dtype=np.float32).reshape(-1, vectors.shape[1])
        out = np.zeros((len(q), len(alive)), dtype=np.float64)
        if not alive.any():
            return out
        dead = ~alive
        for qi, vector in enumerate(q):
            row = out[qi]
            row[:] = vectors.dots(vector, len(alive))
            if dead.any():
                row[dead] = row[alive].min()
        return out

    def memo(self, key: str, build: Callable[[], T]) -> T:
        """A value derived from this view (a retrieval method's lookup table), built once by whichever reader
        asks first and kept as long as the view lives (`ViewCache.get`)."""
        return self.cache.get(key, build)

    def dense_scores(self, query_vectors: npt.ArrayLike) -> FloatArray:
        return self._scores(self.passage_vectors, self.passage_alive, query_vectors)

    def fact_scores(self, query_vectors: npt.ArrayLike, top: int | None = None, lowest: bool = True) -> FloatArray:
        """Cosines of the queries with every fact row, as (q, rows), dead rows at the lowest alive score. With
        `top`, a view with `fact_codes` scores exactly only the `top` best alive rows and the lowest score, and
        gives every other row the lowest (what ranking the top facts and min-max scaling read: the same
        results as all the scores, engram.index.state.coded_rows). With `top` and not `lowest` (a caller that reads only
        the best rows), such a view does not look for the lowest score: every other row is below every best one."""
        if top is None or self.fact_codes is None or not self.fact_alive.any():
            return self._scores(self.fact_vectors, self.fact_alive, query_vectors)
        q = np.asarray(query_vectors, dtype=np.float32).reshape(-1, self.fact_vectors.shape[1])
        out = np.empty((len(q), len(self.fact_alive)), dtype=np.float64)
        for qi, vector in enumerate(q):
            self.fact_codes.extremes(self.fact_vectors, self.fact_alive, vector, top, out[qi], lowest)
        return out

    def phrase_scores(self, query_vectors: npt.ArrayLike) -> FloatArray:
        return self._scores(self.phrase_vectors, self.phrase_alive, query_vectors)

    def rankable(self, passage_scores: FloatArray) -> FloatArray:
        """Scores with dead passages at -inf, which `top_k` never returns."""
        return np.where(self.passage_alive, passage_scores, -np.inf)

    def phrases_of(self, passage_id: str) -> list[str]:
        """The phrase nodes linked to a passage by context edges (empty for unknown or pending passages)."""
        rows = [i for i, p in enumerate(self.passages) if p.id == passage_id and self.passage_alive[i]]
        if not rows:
            return []
        linked = self.tables.context[self.tables.context[:, 0] == rows[0], 1]
        return [self.tables.phrases[i] for i in linked.tolist()]

    def stats(self) -> dict[str, int]:
        relation, synonym, context = len(self.tables.relation), len(self.synonyms[0]), len(self.tables.context)
        return {
            "passages": int(self.passage_alive.sum()),
            "phrases": int(self.phrase_alive.sum()),
            "facts": int(self.fact_alive.sum()),
            "relation_edges": relation,
            "synonym_edges": synonym,
            "context_edges": context,
            "edges": relation + synonym + context,
            "pending": self.pending,
            "failed": self.failed,
        }

    def canonical(self) -> dict[str, object]:
        """The graph by names, independent of row order: alive nodes, and every edge's summed weight keyed by
        its two node names ("p:<phrase>", "d:<passage id>"). For comparing memories."""
        names = [f"p:{k}" for k in self.tables.phrases] + [f"d:{p.id}" for p in self.passages]
        upper = sp.triu(self.adjacency).tocoo()
        edges = {
            tuple(sorted((names[i], names[j]))): round(float(w), 9)
            for i, j, w in zip(upper.row.tolist(), upper.col.tolist(), upper.data.tolist())
        }
        alive = self.passage_alive
        return {
            "passages": sorted(p.id for p, a in zip(self.passages, alive) if a),
            "phrases": sorted(k for k, a in zip(self.tables.phrases, self.phrase_alive) if a),
            "facts": sorted(f for f, a in zip(self.tables.facts, self.fact_alive) if a),
            "edges": edges,
        }


def view(state: IndexState) -> GraphIndex:
    """Derive the arrays of the current state (vectors are shared, not copied; the edge arrays and the walk are
    patched from the previous view's when few edges changed, engram.index.view.edges). The edge arrays are derived
    on the calling thread while a pool thread copies the tables and ranks the rows: both only read the state
    (a caller holds it still), and neither part's arrays depend on the other's."""
    alive = np.array(state.passage_alive, dtype=bool)
    synonyms = state.synonyms.edges()
    order = state.canonical_rows()
    node_rows = state.canonical_nodes(order)
    calls: list[Callable[[], object]] = [
        partial(derive_edges, state, alive, node_rows, synonyms),
        partial(_rows, state, order),
    ]
    derived = in_parallel(calls)
    edges, rows = cast(Edges, derived[0]), cast(_Rows, derived[1])
    tables = GraphTables(
        phrases=rows.phrases,
        facts=rows.facts,
        fact_phrases=rows.fact_phrases,
        context=edges.context,
        relation=edges.relation,
        relation_support=edges.support,
        dropped=rows.dropped,
    )
    return GraphIndex(
        passages=rows.passages,
        passage_alive=alive,
        passage_vectors=state.vectors["passage"].view(),
        tables=tables,
        phrase_alive=rows.phrase_alive,
        phrase_vectors=state.vectors["phrase"].view(),
        fact_alive=rows.fact_alive,
        fact_vectors=state.vectors["fact"].view(),
        synonyms=synonyms,
        context_weight=state.config.context_weight,
        phrase_passage_counts=edges.phrase_passages,
        pending=rows.counts["pending"],
        failed=rows.counts["failed"],
        node_rows=node_rows,
        walk=edges.walk,
        passage_rank=rows.passage_rank,
        phrase_rank=rows.phrase_rank,
        fact_rank=rows.fact_rank,
        names=rows.names,
        patched=edges.patched,
        fact_codes=state.caches.fact_codes if use_codes(state.config, len(state.facts)) else None,
    )


@dataclass(frozen=True)
class _Rows:
    """The parts of a view that are copies or fixed prefixes of the state's tables, and the rows' canonical ranks."""

    phrases: Sequence[str]
    facts: Sequence[Triple]
    fact_phrases: npt.NDArray[np.int64]
    dropped: int
    counts: dict[str, int]
    passages: list[PassageRow]
    phrase_alive: BoolArray
    fact_alive: BoolArray
    passage_rank: npt.NDArray[np.int64]
    phrase_rank: npt.NDArray[np.int64]
    fact_rank: npt.NDArray[np.int64]
    names: NameSnapshot


def _rows(state: IndexState, order: dict[str, npt.NDArray[np.int64]]) -> _Rows:
    return _Rows(
        phrases=Prefix(state.phrases, len(state.phrases)),  # fixed: the list only grows with later commits
        facts=state.facts.upto(len(state.facts)),  # fixed: the table only grows
        fact_phrases=state.fact_phrase_array(),
        dropped=state.dropped(),
        counts=state.stats(),
        passages=list(state.passages),
        phrase_alive=state.phrase_alive_mask(),
        fact_alive=state.fact_alive_mask(),
        passage_rank=_ranks(order["passage"], len(state.passages)),
        phrase_rank=_ranks(order["phrase"], len(state.phrases)),
        fact_rank=_ranks(order["fact"], len(state.facts)),
        names=state.names.snapshot(state.passage_context, state.passage_alive),
    )


def _ranks(order: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.int64]:
    """Position of each row in `order`; rows not in it (dead) come after, by row."""
    ranks = np.arange(size, dtype=np.int64) + len(order)
    ranks[order] = np.arange(len(order), dtype=np.int64)
    return ranks
