"""The approximate synonym search's lost rows (issue 11): rows that no search of the HNSW graph returns, and how
later phrases are still paired with them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engram.graph import ann, synonyms
from engram.graph.synonyms import ANN_FIRST_K, SynonymLists

if not ann.available():
    pytest.skip("the ann extra (faiss-cpu) is not installed", allow_module_level=True)

from engram.graph.ann import AnnIndex
from test_ann import lists_of, pairs


@pytest.fixture
def one_faiss_thread() -> Any:
    """faiss adds in parallel by default, which makes the graph depend on thread timing; one thread fixes it."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def copies_among_random(seed: int) -> np.ndarray:
    """3,000 random unit vectors of which 100 are one vector: searches near the copies stall among them, and
    the neighbour pruning cuts some copies off, so some rows are never returned by a search for their own vector."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3000, 64)).astype(np.float32)
    x[rng.choice(3000, 100, replace=False)] = rng.standard_normal(64).astype(np.float32)
    out: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


class _Forgetful(set[int]):
    def update(self, *others: Any) -> None:
        pass


def test_rows_their_own_search_misses_are_compared_exactly(
    one_faiss_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    vectors = copies_among_random(5)  # a seed whose graph cuts copies off (seeds 2 and 3's do not)
    keys = [f"p{i:04d}" for i in range(3000)]
    exact = pairs(lists_of(None, keys, vectors))
    assert len(exact) == 100 * 99  # the copies, each with the other 99
    lists = lists_of(0, keys, vectors)
    assert pairs(lists) == exact
    assert lists.ann is not None and lists.ann.lost
    lost = sorted(lists.ann.lost)
    found = lists.ann.search(vectors[lost], ANN_FIRST_K)[1]
    assert not (found == np.array(lost)[:, None]).any()  # each lost row: its own search does not return it
    forgetful = property(lambda self: _Forgetful(), lambda self, value: None)
    monkeypatch.setattr(AnnIndex, "lost", forgetful, raising=False)
    assert pairs(lists_of(0, keys, vectors)) != exact  # the contrast: without the exact pass, pairs are lost


def test_a_large_batch_pairs_earlier_lost_rows_by_their_own_searches(
    one_faiss_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of many rows does not compare every row with every lost one (rows x lost, quadratic over a
    build): the rows lost in earlier batches search for themselves and their hits among the batch count the
    other way round; only rows lost now are compared exactly, with the lost ones. Oracle: the exact search's
    pairs (order-independent), for copies split across two batches."""
    vectors = copies_among_random(4)  # a seed whose graph cuts copies off in both batches
    keys = [f"p{i:04d}" for i in range(3000)]
    exact = pairs(lists_of(None, keys, vectors))
    monkeypatch.setattr(synonyms, "ANN_ROW_COST", 1)  # searching is cheap: take the search path at this size
    monkeypatch.setattr(synonyms, "WIDE_ROW_COST", 1)  # and the lost rows' wide searches cheaper than their graph
    compared: list[int] = []
    real = SynonymLists._exact_pairs

    def spy(self: SynonymLists, rows: np.ndarray, others: np.ndarray, vectors_of: Any, kept: Any) -> Any:
        compared.append(len(rows))
        return real(self, rows, others, vectors_of, kept)

    monkeypatch.setattr(SynonymLists, "_exact_pairs", spy)
    lists = SynonymLists(threshold=0.8, top_k=100, ann_min_rows=0)
    for a, b in ((0, 1500), (1500, 3000)):
        lists.add(np.arange(a, b, dtype=np.int64), np.arange(b, dtype=np.int64), lambda r: vectors[r], keys)
    assert lists.ann is not None and lists.ann.lost
    assert compared and max(compared) <= len(lists.ann.lost) < 1500  # only lost rows were compared exactly
    assert pairs(lists) == exact


def test_a_large_batch_pairs_earlier_lost_rows_through_a_graph_of_the_lost_rows(
    one_faiss_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of many rows does not compare every row with every lost one (rows x lost, quadratic over a
    build), nor do the earlier lost rows search the large graph widely at every batch: the rows search a graph of
    the lost rows alone; only rows lost now are compared exactly, with the lost ones, and only rows lost now or
    lost in that graph too search the large graph widely. Oracle: the exact search's pairs (order-independent),
    for copies split across two batches."""
    vectors = copies_among_random(4)  # a seed whose graph cuts copies off in both batches
    keys = [f"p{i:04d}" for i in range(3000)]
    exact = pairs(lists_of(None, keys, vectors))
    monkeypatch.setattr(synonyms, "ANN_ROW_COST", 1)  # searching is cheap: take the search path at this size
    monkeypatch.setattr(synonyms, "LOST_GRAPH_ROW_COST", 1)  # and the graph of the lost rows the cheapest
    compared: list[int] = []
    wide: list[int] = []
    real_exact, real_searched = SynonymLists._exact_pairs, SynonymLists._searched

    def spy(self: SynonymLists, rows: np.ndarray, others: np.ndarray, vectors_of: Any, kept: Any) -> Any:
        compared.append(len(rows))
        return real_exact(self, rows, others, vectors_of, kept)

    def searched(self: SynonymLists, index: AnnIndex, rows: np.ndarray, k: int, vectors_of: Any) -> Any:
        if index is self.ann and k == synonyms.LOST_K:
            wide.extend(rows.tolist())
        return real_searched(self, index, rows, k, vectors_of)

    monkeypatch.setattr(SynonymLists, "_exact_pairs", spy)
    monkeypatch.setattr(SynonymLists, "_searched", searched)
    lists = SynonymLists(threshold=0.8, top_k=100, ann_min_rows=0)
    lists.add(np.arange(1500, dtype=np.int64), np.arange(1500, dtype=np.int64), lambda r: vectors[r], keys)
    assert lists.ann is not None and lists.ann.lost
    before, wide[:] = set(lists.ann.lost), []
    lists.add(np.arange(1500, 3000, dtype=np.int64), np.arange(3000), lambda r: vectors[r], keys)
    graph = lists.ann.lost_graph
    assert graph is not None and sorted(graph.rows().tolist()) == sorted(lists.ann.lost)
    assert before and not (set(wide) & before - graph.lost)  # earlier lost rows reached in their graph: no wide search
    assert compared and max(compared) <= len(lists.ann.lost) < 1500  # only lost rows were compared exactly
    assert pairs(lists) == exact


def test_rows_find_an_earlier_lost_row_in_the_graph_of_the_lost_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pairs of a large batch with an earlier lost row come from the batch's searches of the lost rows'
    graph, not from a wide search by the lost row. Oracle: the planted near copies of the rows noted lost (their
    only partners), which `_lost_pairs` must return, while no lost row searches the large graph."""
    rng = np.random.default_rng(11)
    base = rng.standard_normal((600, 48)).astype(np.float32)
    near = base[:20] + 0.3 * rng.standard_normal((20, 48)).astype(np.float32)  # cosine ~0.96 with rows 0-19
    vectors = np.concatenate([base, near])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    monkeypatch.setattr(synonyms, "ANN_ROW_COST", 1)  # searching is cheap: take the search path at this size
    monkeypatch.setattr(synonyms, "LOST_GRAPH_ROW_COST", 1)  # and the graph of the lost rows the cheapest
    lists = SynonymLists(threshold=0.8, top_k=100, ann_min_rows=0)
    index = lists.ann_index(lambda r: vectors[r], 620)
    index.lost.update(range(20))  # noted lost by an earlier batch (the graph here would reach them)
    wide: list[int] = []
    real = SynonymLists._searched

    def searched(self: SynonymLists, graph: AnnIndex, rows: np.ndarray, k: int, vectors_of: Any) -> Any:
        if graph is index and k == synonyms.LOST_K:
            wide.extend(rows.tolist())
        return real(self, graph, rows, k, vectors_of)

    monkeypatch.setattr(SynonymLists, "_searched", searched)
    rows = np.arange(600, 620, dtype=np.int64)
    mask = np.zeros(620, dtype=bool)
    mask[rows] = True
    found = lists._lost_pairs(index, rows, mask, lambda r: vectors[r])
    got = {(int(a), int(b)) for q, t in found for a, b in zip(q, t)}
    assert {(600 + i, i) for i in range(20)} <= got and not wide
    assert index.lost_graph is not None and sorted(index.lost_graph.rows().tolist()) == list(range(20))


def test_the_lost_rows_vectors_are_read_once_and_follow_the_lost_set() -> None:
    """Oracle: the rows gathered directly from the matrix; each row is read through the callback only once."""
    matrix = np.random.default_rng(9).standard_normal((50, 8)).astype(np.float32)
    index = AnnIndex(8)
    reads: list[int] = []

    def gather(rows: np.ndarray) -> np.ndarray:
        reads.extend(rows.tolist())
        return matrix[rows]

    for lost in ([3, 7, 20], [3, 7, 20], [1, 7, 20, 44], [44], [], [0, 44, 49]):
        rows = np.array(lost, dtype=np.int64)
        assert np.array_equal(index.lost_vectors(rows, gather), matrix[rows])
    assert sorted(reads) == [0, 1, 3, 7, 20, 44, 44, 49]  # 44 kept while it stayed lost, read again after []
