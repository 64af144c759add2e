"""Fact scores through 8-bit codes (engram.index.state.coded_rows, issue 11): the best rows, their scores and the lowest
score are exactly those of a full float32 scan, and retrieval gives the same results with and without codes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from engram import Document, GraphConfig, InputError, Memory, MemoryConfig
from engram.embed import HashEmbedder
from engram.graph.parallel import row_dots
from engram.index.state import coded_rows as coded
from engram.index.state.coded_rows import CodedRows, use_codes
from engram.index.state.rows import Rows
from engram.retrieve.scoring import min_max, top_k

if not coded.available():
    pytest.skip("the ann extra (simsimd) is not installed", allow_module_level=True)


def clustered(count: int, dim: int, seed: int, spread: float = 0.05) -> np.ndarray:
    """Unit rows around a few centres, with exact copies: many scores close together, and ties."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(8, dim))
    x = centres[rng.integers(0, 8, count)] + spread * rng.normal(size=(count, dim))
    copies = np.arange(0, count - 1, 17)
    x[copies] = x[copies + 1]  # copies: equal scores, ordered by the tie-break
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def oracle(matrix: np.ndarray, alive: np.ndarray, query: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The full scan's top rows (ties by row), their scores, and the lowest alive score."""
    scores = row_dots(np.ascontiguousarray(matrix), query).astype(np.float64)
    best = top_k(np.where(alive, scores, -np.inf), top)
    return best, scores[best], float(scores[alive].min())


def check(codes: CodedRows, rows: Rows, alive: np.ndarray, queries: np.ndarray, top: int) -> None:
    view = rows.view()
    matrix = np.asarray(view)
    for query in queries:
        got = codes.extremes(view, alive, query, top)
        best, scores, low = oracle(matrix, alive, query, top)
        mine = top_k(np.where(alive, got, -np.inf), top)
        assert mine.tolist() == best.tolist()
        assert got[mine].tolist() == scores.tolist()  # bit for bit
        assert float(got[alive].min()) == low
        assert min_max(got)[mine].tolist() == min_max(np.where(alive, row_dots(matrix, query), low))[best].tolist()
        only = codes.extremes(view, alive, query, top, lowest=False)  # the best rows alone
        assert top_k(np.where(alive, only, -np.inf), top).tolist() == best.tolist()
        assert only[best].tolist() == scores.tolist()
        others = np.setdiff1d(np.flatnonzero(alive), best)
        unscored = others[only[others] != row_dots(matrix, query)[others].astype(np.float64)]
        assert len(unscored) and float(only[unscored].max()) < float(scores.min())  # below the best: no tie


@pytest.fixture()
def split_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches cut into row ranges even for these small tables."""
    monkeypatch.setattr(coded, "SPLIT_BYTES", 0)


@pytest.mark.parametrize("top", [1, 5, 300])
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_the_best_and_worst_rows_are_those_of_a_full_scan(top: int, parts: int, split_small: None) -> None:
    """Near-equal scores around the cut (clusters, copies), dead rows, rows appended after the codes were
    fitted and outside their ranges (scored exactly), and a `top` beyond the first search's width; the codes
    searched whole (1) or in row ranges searched at once and merged (2 and 3: a query alone is cut into that
    many, the query and its negation into one range each for 2 and 3)."""
    rng = np.random.default_rng(1)
    rows = Rows(48)
    rows.append(clustered(6000, 48, seed=2))
    codes = CodedRows(rows, parts=parts)
    alive = rng.random(6000) > 0.2
    queries = np.concatenate([clustered(6, 48, seed=2, spread=0.2), clustered(4, 48, seed=5)])
    check(codes, rows, alive, queries, top)
    assert codes.encoded == 6000 and not len(codes.outliers)
    later = 3.0 * clustered(500, 48, seed=9)  # far outside the fitted ranges
    later /= np.linalg.norm(later, axis=1, keepdims=True)
    rows.append(np.concatenate([later, clustered(500, 48, seed=2)]))
    alive = np.concatenate([alive, rng.random(1000) > 0.1])
    check(codes, rows, alive, queries, top)
    assert codes.encoded == 7000 and len(codes.outliers) > 0


@pytest.mark.parametrize("parts", [1, 4])
def test_scores_closer_than_the_coding_error_and_many_equal_ones(parts: int, split_small: None) -> None:
    """Random directions (scores at the cut closer together than the codes can tell apart), and a query whose
    best rows are 1,000 copies (more than the first search returns: the search widens, and the tie-break
    picks the lowest rows)."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(8000, 48))
    x[3000:4000] = x[2999]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rows = Rows(48)
    rows.append(x.astype(np.float32))
    queries = rng.normal(size=(40, 48)).astype(np.float32)
    queries[0] = x[2999]
    unit = queries / np.linalg.norm(queries, axis=1)[:, None]
    check(CodedRows(rows, parts=parts), rows, np.ones(8000, dtype=bool), unit, 5)
    # every row's score within 0.05 of 0.5, hundreds of them within the codes' error of the cut: the errors
    # reorder the band, and only rows within twice the error bound of the cut, re-scored, give the exact ones
    band, near_q = banded(rng, np.float32, 30)
    check(CodedRows(band, parts=parts), band, np.ones(8000, dtype=bool), near_q, 5)


def banded(rng: np.random.Generator, dtype: type, queries: int) -> tuple[Rows, np.ndarray]:
    """8,000 rows (stored as `dtype`) whose scores for a direction q all lie within 0.05 of 0.5, and `queries`
    queries near q: hundreds of rows within the codes' error of the cut."""
    q = rng.normal(size=48)
    q /= np.linalg.norm(q)
    noise = rng.normal(size=(8000, 48))
    noise -= np.outer(noise @ q, q)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    a = 0.5 + 0.05 * rng.random(8000)
    band = Rows(48, dtype)
    band.append((a[:, None] * q + np.sqrt(1 - a**2)[:, None] * noise).astype(np.float32))
    near_q = q + 0.002 * rng.normal(size=(queries, 48))
    return band, (near_q / np.linalg.norm(near_q, axis=1)[:, None]).astype(np.float32)


def test_rows_whose_coding_errors_point_along_the_query_are_still_ranked_exactly() -> None:
    """The worst case of the bound: row A's coding error lowers its code score by ||q|| x error, row B's raises
    it by nearly as much, so B's code score passes A's although A's float32 score is higher. Only a cut at
    twice the bound below B's code score keeps A (at once the bound, it is lost)."""
    s = np.float32(1 / 127)
    fit = np.ones(4, dtype=np.float32)  # fits every scale to 1/127 (dead: its score would top the ranking)
    a = s * np.float32(10.49) * np.ones(4, dtype=np.float32)  # codes 10, 10, 10, 10
    b = s * np.array([10.51, 10.51, 10.51, 9.6], dtype=np.float32)  # codes 11, 11, 11, 10
    rows = Rows(4)
    rows.append(np.stack([fit, a, b]))
    alive = np.array([False, True, True])
    query = np.full(4, 0.5, dtype=np.float32)
    best, scores, _ = oracle(np.asarray(rows.view()), alive, query, 1)
    assert best.tolist() == [1]
    got = CodedRows(rows).extremes(rows.view(), alive, query, 1, lowest=False)  # A is not found as the worst
    assert top_k(np.where(alive, got, -np.inf), 1).tolist() == [1] and got[1] == scores[0]


def test_an_outlier_whose_code_scores_highest_does_not_hide_the_best_rows() -> None:
    """A row appended outside the fitted ranges: clipped, its code scores far above every row for this query,
    while its float32 score is far below. Outliers are scored exactly and left out of the codes' cut."""
    rows = Rows(48)
    first = clustered(3000, 48, seed=3)
    rows.append(first)
    codes = CodedRows(rows)
    query = np.ones(48, dtype=np.float32)
    query[0] = -0.01
    query /= np.linalg.norm(query)
    codes.extremes(rows.view(), np.ones(3000, dtype=bool), query, 1)  # fits the codes to the first rows
    odd = np.abs(first).max(axis=0)
    odd[0] = 10_000.0  # clipped to the range: its code score misses -0.01 x 10,000
    rows.append(odd[None])
    alive = np.ones(3001, dtype=bool)
    best, scores, low = oracle(np.asarray(rows.view()), alive, query, 1)
    got = codes.extremes(rows.view(), alive, query, 1)
    assert top_k(got, 1).tolist() == best.tolist() and got[best].tolist() == scores.tolist()
    assert float(got.min()) == low == row_dots(odd[None], query)[0]
    assert codes.outliers.tolist() == [3000]


@pytest.mark.parametrize("dim", [384, 100, 7])
def test_code_scores_are_exact_integer_sums(dim: int) -> None:
    """The integer kernel against int64 sums: codes and weights at the extremes (+-127 in every dimension: the
    largest sums, 6.2M at 384 dimensions) and random ones, over dimensions that are and are not whole SIMD
    blocks."""
    rng = np.random.default_rng(dim)
    codes = rng.integers(-127, 128, size=(500, dim)).astype(np.int8)
    codes[0], codes[1] = 127, -127
    coded_rows = CodedRows(Rows(dim))
    for weights in (np.full(dim, 127), np.full(dim, -127), rng.integers(-127, 128, size=dim)):
        got = coded_rows._scan(codes, weights.astype(np.int8))
        assert got.tolist() == (codes.astype(np.int64) @ weights.astype(np.int64)).tolist()


def test_a_view_older_than_the_codes_masks_the_newer_rows() -> None:
    rows = Rows(32)
    rows.append(clustered(3000, 32, seed=4))
    old_view, old_alive = rows.view(), np.ones(3000, dtype=bool)
    codes = CodedRows(rows)
    rows.append(clustered(1000, 32, seed=7))
    query = clustered(1, 32, seed=7)[0]
    codes.extremes(rows.view(), np.ones(4000, dtype=bool), query, 5)  # the newer view encodes all 4000
    got = codes.extremes(old_view, old_alive, query, 5)
    best, scores, low = oracle(np.asarray(old_view), old_alive, query, 5)
    assert len(got) == 3000 and top_k(got, 5).tolist() == best.tolist() and float(got.min()) == low
    assert got[best].tolist() == scores.tolist()


def test_codes_are_a_quarter_of_the_float32_rows() -> None:
    rows = Rows(64)
    rows.append(clustered(2000, 64, seed=3))
    codes = CodedRows(rows)
    codes.extremes(rows.view(), np.ones(2000, dtype=bool), clustered(1, 64, seed=3)[0], 5)
    assert codes.nbytes * 4 == rows.view().shape[0] * 64 * 4


def test_the_setting_is_checked_and_auto_waits_for_enough_facts() -> None:
    with pytest.raises(InputError, match="fact_codes must be auto, on or off"):
        MemoryConfig.from_dict({"graph": {"fact_codes": "yes"}})
    assert use_codes(GraphConfig(fact_codes="on"), 10)
    assert not use_codes(GraphConfig(fact_codes="off"), 10**9)
    few = GraphConfig(fact_codes_min_rows=100)
    assert not use_codes(few, 99) and use_codes(few, 100)


WORDS = ["river", "mill", "town", "bank", "north", "old", "lake", "berg", "anna", "oster", "1901", "1910"]


def corpus(count: int) -> tuple[list[Document], list[dict[str, object]]]:
    rng = np.random.default_rng(11)

    def phrase() -> str:
        return " ".join(rng.choice(WORDS, int(rng.integers(1, 3))))

    docs, extractions = [], []
    for i in range(count):
        triples = [[phrase(), str(rng.choice(["is near", "founded", "owned by"])), phrase()] for _ in range(3)]
        docs.append(Document(f"d{i}", ". ".join(" ".join(t) for t in triples) + "."))
        extractions.append({"id": f"d{i}", "triples": triples})
    return docs, extractions


@pytest.mark.parametrize("method", ["hipporag2", "hipporag2-paper", "hipporag2-no-passage-nodes"])
def test_retrieval_is_the_same_with_and_without_codes(tmp_path: Path, method: str) -> None:
    docs, extractions = corpus(120)
    queries = ["who owned the old mill", "north river bank", "anna berg 1901", "lake oster town"]
    results = []
    for setting in ("off", "on"):
        config = MemoryConfig(graph=GraphConfig(ann="off", fact_codes=setting))
        with Memory(tmp_path / setting, embedder=HashEmbedder(dim=64), config=config) as memory:
            memory.index(docs, extractions=extractions)
            memory.delete([f"d{i}" for i in range(0, 120, 7)])  # dead facts too
            assert (memory.context().view.fact_codes is not None) == (setting == "on")
            found = memory.retrieve(queries, top_k=10, method=method)
            results.append([[(p.id, p.score) for p in r.passages] for r in found])
            results.append([(r.method, r.facts, r.candidate_facts, r.seeds) for r in found])
    assert results[0] == results[2] and results[1] == results[3]
    assert all(facts for _, facts, _, _ in results[1])  # every query's facts were found and scored


@pytest.mark.parametrize("size", [1, 15, 16, 17, 100, 5000])
def test_kth_largest_is_that_of_a_sort(size: int) -> None:
    """Against a full sort: ties (integer scores), dead rows at -inf, values that rise along the rows (the
    strided sample then holds none of the best), every k from 1 to the whole."""
    rng = np.random.default_rng(size)
    cases = [
        rng.integers(-5, 6, size).astype(np.float32),
        np.arange(size, dtype=np.float32),
        np.where(rng.random(size) < 0.7, -np.inf, rng.normal(size=size)).astype(np.float32),
    ]
    for values in cases:
        ranked = np.sort(values)[::-1]
        for k in sorted({1, 2, 3, 16, size // 2, size} - {0}):
            if k <= size:
                assert coded.kth_largest(values.copy(), k) == float(ranked[k - 1])


def test_the_kernels_leave_none_alone(tmp_path: Path) -> None:
    """simsimd 6.5's `cdist(..., out=...)` takes away one reference to None per call, and Python before 3.12 aborts
    once the count reaches zero (a MuSiQue memory died after about 15,000 queries): the code scan, the float32
    row dots and whole retrievals through codes keep None's count where it was (3.12+: None is immortal)."""
    rng = np.random.default_rng(7)
    floats = rng.normal(size=(300, 64)).astype(np.float32)
    codes = rng.integers(-127, 128, size=(300, 64)).astype(np.int8)
    coded_rows = CodedRows(Rows(64))
    before = sys.getrefcount(None)
    for _ in range(2000):
        row_dots(floats, floats[0])
        coded_rows._scan(codes, codes[0])
    assert sys.getrefcount(None) - before > -100  # was -3989
    docs, extractions = corpus(60)
    config = MemoryConfig(graph=GraphConfig(ann="off", fact_codes="on"))
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64), config=config) as memory:
        memory.index(docs, extractions=extractions)
        memory.retrieve(["who owned the old mill"], top_k=5)
        before = sys.getrefcount(None)
        for _ in range(300):
            memory.retrieve(["who owned the old mill", "anna berg 1901"], top_k=5)
        assert sys.getrefcount(None) - before > -100  # was -1824


@pytest.mark.parametrize("top", [1, 5, 300])
@pytest.mark.parametrize("parts", [1, 3])
def test_a_packed_table_is_its_own_codes_and_ranks_as_a_full_scan(
    top: int, parts: int, split_small: None, tmp_path: Path
) -> None:
    """Fact rows stored as packed 8-bit rows (engram.store.packed_rows) are scored through their own codes and
    scales: nothing is encoded, and the best rows, their scores and the lowest score are those of the full scan
    of the rows as they read (the oracle), over a saved file, a spilled block and rows appended since; then over
    scores within a narrow band, where the codes alone cannot order the rows near the cut."""
    rng = np.random.default_rng(3)
    rows = Rows(48, np.int8)
    rows.append(clustered(4000, 48, seed=2))
    assert rows.spill(tmp_path, least=1)
    rows.append(clustered(2000, 48, seed=4))
    codes = CodedRows(rows, parts=parts)
    alive = rng.random(6000) > 0.2
    queries = np.concatenate([clustered(6, 48, seed=2, spread=0.2), clustered(4, 48, seed=5)])
    check(codes, rows, alive, queries, top)
    assert codes.encoded == 0 and codes.saved() is None
    band, near_q = banded(rng, np.int8, 10)
    check(CodedRows(band, parts=parts), band, np.ones(8000, dtype=bool), near_q, min(top, 50))
