"""`FactRows` and `PairCounts`: lookups over a restored state's saved arrays, with the changes since beside them,
against plain dicts given the same operations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.index.state.fact_pair_keys import FactRows, PairCounts

PHRASES = [f"p{i}" for i in range(12)]
RELATIONS = ["a", "b", "c"]
fact = st.tuples(st.sampled_from(PHRASES), st.sampled_from(RELATIONS), st.sampled_from(PHRASES))


@settings(max_examples=80, deadline=None)
@given(saved=st.lists(fact, unique=True, max_size=40), added=st.lists(fact, max_size=20), probes=st.lists(fact))
def test_fact_rows_find_saved_and_added_facts(
    saved: list[tuple[str, str, str]], added: list[tuple[str, str, str]], probes: list[tuple[str, str, str]]
) -> None:
    phrases = PHRASES[::-1]  # rows unrelated to names
    row_of = {p: i for i, p in enumerate(phrases)}
    pairs = np.array([[row_of[s], row_of[o]] for s, _, o in saved], dtype=np.int64).reshape(-1, 2)
    verbs = np.array([RELATIONS.index(r) for _, r, _ in saved], dtype=np.int64)
    rows = FactRows()
    rows.restore(phrases, row_of, RELATIONS, pairs, verbs)
    oracle = {f: i for i, f in enumerate(saved)}
    for f in added:
        if f in oracle:
            with pytest.raises(ValueError):
                rows[f] = len(oracle)
        else:
            rows[f] = oracle[f] = len(oracle)
    for f in [*probes, *saved, *added, ("unknown", "a", "p1"), ("p1", "unknown", "p2")]:
        assert rows.get(f) == oracle.get(f)
        assert (f in rows) == (f in oracle)
    assert len(rows) == len(oracle) and dict(rows) == oracle


pair = st.tuples(st.integers(0, 30), st.integers(0, 30)).map(lambda p: (min(p), max(p) + 1))
change = st.tuples(pair, st.integers(-1, 3))  # -1: delete, else add this much


@settings(max_examples=150, deadline=None)
@given(saved=st.dictionaries(pair, st.integers(1, 5), max_size=40), changes=st.lists(change, max_size=60))
def test_pair_counts_follow_a_dict(
    saved: dict[tuple[int, int], int], changes: list[tuple[tuple[int, int], int]]
) -> None:
    counts = PairCounts()
    items = list(saved.items())[::-1]  # not sorted: restore sorts
    counts.restore(np.array([p for p, _ in items], dtype=np.int64).reshape(-1, 2), np.array([c for _, c in items]))
    oracle = dict(saved)
    for p, delta in changes:
        if delta < 0:
            if p in oracle:
                del oracle[p], counts[p]
            else:
                with pytest.raises(KeyError):
                    del counts[p]
        elif delta:
            oracle[p] = counts[p] = oracle.get(p, 0) + delta
        assert len(counts) == len(oracle)
        assert counts.get(p) == oracle.get(p) and (p in counts) == (p in oracle)
    keys, values = counts.arrays()
    assert [tuple(k) for k in keys.tolist()] == sorted(oracle)
    assert values.tolist() == [oracle[k] for k in sorted(oracle)]
    assert dict(counts) == oracle


def test_pair_counts_refuse_damaged_arrays() -> None:
    counts = PairCounts()
    with pytest.raises(ValueError):
        counts.restore(np.array([[1, 2], [0, 1], [1, 2]]), np.array([1, 1, 1]))  # a pair twice
    with pytest.raises(ValueError):
        counts.restore(np.array([[0, 1]]), np.array([0]))  # a count that is not positive
    with pytest.raises(ValueError):
        counts.restore(np.array([[0, 1]]), np.array([1, 2]))
