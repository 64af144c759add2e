"""The approximate synonym search's candidate pairs (engram.graph.synonym_pairs) and the half-precision HNSW
graph (engram.graph.ann): pairs against brute-force oracles, the lists of rows added in two batches against the
exact search, and a graph saved with float32 vectors read and grown as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("faiss")

from engram.embed import HashEmbedder
from engram.graph import ann, synonyms
from engram.graph.ann import AnnIndex
from engram.graph.synonym_pairs import Neighbour, oriented, through_lists
from engram.graph.synonyms import SynonymLists
from test_ann import exact_top, found, lists_of, pairs, phrases
from test_ann_lost import copies_among_random, one_faiss_thread

__all__ = ["one_faiss_thread"]  # a fixture, used by name


def random_pairs(rng: np.random.Generator, top: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (rng.integers(0, top, size=n).astype(np.int64), rng.integers(-1, top + 3, size=n).astype(np.int64))
        for n in (count, count // 2, 0)
    ]


def test_oriented_pairs_against_a_set_of_tuples() -> None:
    rng = np.random.default_rng(0)
    top = 40
    batches = random_pairs(rng, top, 300)
    searched, wanted = rng.random(top) < 0.4, rng.random(top) < 0.7
    want: set[tuple[int, int]] = set()
    for qs, ts in batches:
        for q, t in zip(qs.tolist(), ts.tolist()):
            if 0 <= t < top and searched[t]:
                want.add((t, q)) if wanted[q] and q != t else None
            if 0 <= t < top and wanted[t] and q != t:
                want.add((q, t))
    q_rows, t_rows = oriented(batches, searched, wanted)
    got = list(zip(q_rows.tolist(), t_rows.tolist()))
    assert got == sorted(want)  # each pair once, in pair order


def test_pairs_through_lists_against_loops() -> None:
    rng = np.random.default_rng(1)
    top = 50
    batches = random_pairs(rng, top, 200)
    searched = rng.random(top) < 0.3
    lists: dict[int, list[Neighbour]] = {
        row: [(0.9, "k", int(x)) for x in rng.integers(0, top, size=int(rng.integers(0, 5)))]
        for row in range(top)
        if rng.random() < 0.8
    }
    want: list[tuple[int, int]] = []
    for qs, ts in batches:
        for q, t in zip(qs.tolist(), ts.tolist()):
            if 0 <= t < top and not searched[t]:
                want.extend((q, n[2]) for n in lists.get(t, []))
    q_rows, members = through_lists(batches, searched, lists)
    assert sorted(zip(q_rows.tolist(), members.tolist())) == sorted(want) and len(want) > 50


def two_batches(vectors: np.ndarray, keys: list[str]) -> SynonymLists:
    lists = SynonymLists(threshold=0.8, top_k=100, ann_min_rows=0)
    for a, b in ((0, 1500), (1500, 3000)):
        lists.add(np.arange(a, b, dtype=np.int64), np.arange(b, dtype=np.int64), lambda r: vectors[r], keys)
    return lists


@pytest.mark.parametrize("float32", [False, True])
def test_rows_the_graph_stops_reaching_keep_their_pairs(
    one_faiss_thread: None, monkeypatch: pytest.MonkeyPatch, float32: bool
) -> None:
    """100 copies of one vector among random ones, added in two batches: inserting the second batch prunes
    links into copies of the first whose own search had returned them, and no search reaches them after. The
    lists must still be the exact search's (the oracle), with either graph kind; without the pairs through the
    lists they are not, for some of the seeds (the contrast, measured: all 6 of these seeds with float32 vectors,
    4 with half-precision ones)."""
    real = ann._graph
    monkeypatch.setattr(ann, "_graph", lambda f, d, m, e, full=False: real(f, d, m, e, float32))
    monkeypatch.setattr(synonyms, "ANN_ROW_COST", 1)  # the search path at this size
    keys = [f"p{i:04d}" for i in range(3000)]
    missed = []
    for seed in (0, 4, 5, 7, 10, 11):
        vectors = copies_among_random(seed)
        exact = pairs(lists_of(None, keys, vectors))
        assert pairs(two_batches(vectors, keys)) == exact
        with monkeypatch.context() as patched:
            patched.setattr(synonyms, "through_lists", lambda *a: (np.zeros(0, np.int64),) * 2)
            missed.append(len(set(exact) - set(pairs(two_batches(vectors, keys)))))
    assert sum(m > 0 for m in missed) >= 3, missed


def test_half_precision_cosines_are_within_the_bound(one_faiss_thread: None) -> None:
    """A stored component is off by at most 2^-11 of itself (half precision's unit roundoff), so |approximate -
    exact cosine| <= 2^-11 for unit vectors, plus float32 sums (the bound engram.graph.ann's SLACK relies on)."""
    vectors = HashEmbedder(dim=384).embed(phrases(3000, seed=3))
    index = AnnIndex(384, ef_search=64)
    index.add(np.arange(len(vectors)), vectors)
    sims, rows = index.search(vectors[:500], 32)
    exact = np.einsum("qd,qkd->qk", vectors[:500].astype(np.float64), vectors[rows].astype(np.float64))
    error = np.abs(sims.astype(np.float64) - exact)
    assert error.max() <= 2.0**-11 + 1e-6 and error.max() > 0  # approximate, and within the bound


def test_a_graph_saved_with_float32_vectors_loads_and_grows_alike(tmp_path: Path) -> None:
    """Memories saved before the half-precision graph hold an IndexHNSWFlat with its vectors: it loads with
    them, its additions are float32 too, searches stay exact (oracle: float64 top-k), and the merged graph keeps
    the float32 kind, saved without its vectors and given float32 copies when loaded again."""
    import faiss

    vectors = HashEmbedder(dim=64).embed(phrases(700, seed=5))
    queries, want = vectors[::7], exact_top(vectors, vectors[::7], 5)
    old: Any = faiss.IndexHNSWFlat(64, 16, faiss.METRIC_INNER_PRODUCT)
    old.add(vectors[:500])
    faiss.write_index(old, str(tmp_path / "old.faiss"))  # with its vectors, as engram wrote graphs before
    loaded = AnnIndex.load(tmp_path / "old.faiss", 64)
    loaded.ef_search = 400
    loaded.add(np.arange(500, 700), vectors[500:])
    assert np.allclose(found(loaded, vectors, queries, 5), want, atol=1e-6)
    assert np.allclose(loaded.search(queries, 5)[0], want, atol=1e-6)  # float32 cosines: no half precision
    loaded.write(tmp_path / "merged.faiss")
    merged: Any = faiss.read_index(str(tmp_path / "merged.faiss"))
    assert isinstance(merged, faiss.IndexHNSWFlat) and merged.storage is None  # the links alone
    assert merged.hnsw.nb_neighbors(1) == 16 != ann.M  # it grew with its own links per entry, not the default's
    again = AnnIndex.load(tmp_path / "merged.faiss", 64, vectors=lambda rows: vectors[rows])
    again.ef_search = 400
    assert np.allclose(again.search(queries, 5)[0], want, atol=1e-6)  # filled with float32 copies
    fresh = AnnIndex(64, m=16)
    fresh.add(np.arange(700), vectors)
    fresh.write(tmp_path / "new.faiss")
    assert isinstance(faiss.read_index(str(tmp_path / "new.faiss")), faiss.IndexHNSWSQ)
    half = AnnIndex.load(tmp_path / "new.faiss", 64, vectors=lambda rows: vectors[rows])
    half.ef_search = 400
    error = np.abs(half.search(queries, 5)[0] - want)
    assert 0 < error.max() <= 2.0**-11 + 1e-6  # filled with half-precision copies, as it adds
