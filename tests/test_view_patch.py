"""Issue 11: a view's edge arrays patched from the previous view's (engram.index.view.edges) equal, to the bit, the
ones built from the state from scratch, over any sequence of index, delete and update with a read after each."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram import Memory
from engram.embed import HashEmbedder
from engram.index.state.fact_pair_keys import PairCounts
from engram.index.state.index_state import IndexState
from engram.index.state.patch_base import PatchBase
from engram.index.view import csr_assembly as assembly_module
from engram.index.view import edges
from engram.index.view.graph_index import GraphIndex, view
from rooms import Rooms
from test_continual import CONFIG, Live, apply, matches_oracle, observe, operation, oracle_graph, same


def built(state: IndexState) -> GraphIndex:
    """The view built from scratch, leaving the state's patch base as it was."""
    saved = state.caches.patch_base, state.caches.touched, state.synonyms.touched
    state.caches.forget_patch_base()
    try:
        return view(state)
    finally:
        state.caches.patch_base, state.caches.touched, state.synonyms.touched = saved


def identical(a: GraphIndex, b: GraphIndex) -> None:
    for name in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(a.walk.matrix, name), getattr(b.walk.matrix, name)), name
    assert a.walk.matrix.data.tobytes() == b.walk.matrix.data.tobytes()
    for name in ("root", "inverse_root", "dangling"):  # the walk's scaling, patched too
        assert getattr(a.walk, name).tobytes() == getattr(b.walk, name).tobytes(), name
    assert np.array_equal(a.node_rows, b.node_rows)
    assert np.array_equal(a.tables.relation, b.tables.relation)
    assert a.tables.relation_support.tobytes() == b.tables.relation_support.tobytes()
    assert np.array_equal(a.tables.context, b.tables.context)
    assert np.array_equal(a.phrase_passage_counts, b.phrase_passage_counts)


def arrays_of(index: GraphIndex) -> bytes:
    matrix = index.walk.matrix
    return b"".join(a.tobytes() for a in (matrix.indptr, matrix.indices, matrix.data))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=7), st.sampled_from(["runs", "pieces", "masks"]))
def test_patched_views_equal_built_ones(ops: list[Any], assembly: str) -> None:
    saved = assembly_module.MAX_RUNS, assembly_module.PIECE, assembly_module.MIN_WORK
    if assembly == "masks":  # rows assembled (and the walk's scaling carried) by whole-array masks, as for many runs
        assembly_module.MAX_RUNS = 0
    if assembly == "pieces":  # runs copied 3 entries at a time, the pieces split between the pool's threads
        assembly_module.PIECE, assembly_module.MIN_WORK = 3, 0
    try:
        patched_views_equal_built_ones(ops)
    finally:
        assembly_module.MAX_RUNS, assembly_module.PIECE, assembly_module.MIN_WORK = saved


def patched_views_equal_built_ones(ops: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        live: Live = {}
        known: dict[Any, Any] = {}
        with Rooms(Path(tmp) / "m", HashEmbedder(dim=64), CONFIG) as memory:
            first = memory.live.current()
            assert not first.patched
            held: list[tuple[GraphIndex, bytes]] = []  # every other view, held on (the others' memory is reused)
            for i, op in enumerate(ops):
                apply(memory, live, op, known)
                current = memory.live.current()
                assert current.patched or current is first
                identical(current, built(memory.live.load()))
                if i % 2:
                    held.append((current, arrays_of(current)))
            assert all(arrays_of(v) == saved for v, saved in held)  # later patches never wrote into them
            patched = observe(memory)
        matches_oracle(patched["graph"], oracle_graph(live, known, HashEmbedder(dim=64)))
        with Memory(Path(tmp) / "fresh", embedder=HashEmbedder(dim=64), config=CONFIG) as fresh:
            extractions = [{**e, "id": d.id} for d, _ in live.values() if (e := known.get((d.title, d.text)))]
            fresh.index([d for d, _ in live.values()], extractions=extractions)
            same(observe(fresh), patched)


def test_many_changes_rebuild_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PatchBase, "touch_limit", lambda self: 1)
    live: Live = {}
    known: dict[Any, Any] = {}
    with Rooms(tmp_path, HashEmbedder(dim=64), CONFIG) as memory:
        apply(memory, live, ("index", [("doc0", ([("north river", "is near", "old mill")], True, 0))]), known)
        memory.live.current()
        two = [("doc1", ([("Anna Berg", "founded", "mill town")], True, 1)), ("doc2", ([], False, 2))]
        apply(memory, live, ("index", two), known)
        state = memory.live.load()
        assert state.caches.patch_base is None and state.caches.touched is None  # past the limit: nothing more recorded
        current = memory.live.current()
        assert not current.patched
        identical(current, built(state))


def test_relation_table_of_saved_pairs_sorted_or_not() -> None:
    """A state file saves its relation pairs sorted, which the first view after opening takes as they are; pairs
    in any other order are sorted (oracle: Python's sort of the pairs)."""
    rng = np.random.default_rng(2)
    pairs = np.unique(rng.integers(0, 300, (500, 2)), axis=0)
    pairs = pairs[pairs[:, 0] < pairs[:, 1]]
    counts = rng.integers(1, 5, len(pairs))
    want = sorted(zip(map(tuple, pairs.tolist()), counts.tolist()))
    for order in (np.arange(len(pairs)), rng.permutation(len(pairs))):
        relation = PairCounts()
        relation.restore(pairs[order], counts[order])
        got_pairs, support = edges._relation_table(cast(IndexState, SimpleNamespace(relation=relation)))
        assert [tuple(p) for p in got_pairs.tolist()] == [p for p, _ in want]
        assert support.tolist() == [float(c) for _, c in want] and support.dtype == np.float64
