"""The synonym edges as arrays, patched by the pairs changed since the last call (engram.graph.pair_arrays)
instead of sorted again. Oracles: Python's sort of the table as it stands, and synonym lists built from scratch
over the same alive phrases (their first `edges()` sorts every edge)."""

from __future__ import annotations

import numpy as np
import pytest

from engram.embed import HashEmbedder
from engram.graph.pair_arrays import SortedPairs, splice, splice_plan
from engram.graph.synonyms import SynonymLists
from test_synonym_restore import names


def sorted_table(table: dict[tuple[int, int], tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    keys = sorted(table)
    pairs = np.array(keys, dtype=np.int64).reshape(-1, 2)
    return pairs, np.array([table[k][1] for k in keys], dtype=np.float64)


def test_splice_gives_the_sorted_table_after_the_changes() -> None:
    """A spliced key array (and the values and pairs along it) equals Python's sort of the keys that stay and
    the keys added, with their values, on random tables and changes: dropped keys present or not, added keys
    new or dropped first (a changed value), at the ends or in the middle, empty tables and empty changes."""
    rng = np.random.default_rng(5)
    for _ in range(2000):
        old = {int(k): float(rng.random()) for k in rng.integers(0, 60, int(rng.integers(0, 40)))}
        drop = {int(k) for k in rng.integers(0, 70, int(rng.integers(0, 10)))}
        free = sorted(set(range(70)) - (set(old) - drop))
        added = {int(k): float(rng.random()) for k in rng.choice(free, int(rng.integers(0, 10)), replace=False)}
        expected = {k: v for k, v in old.items() if k not in drop} | added
        keys = np.array(sorted(old), dtype=np.int64)
        add = np.array(sorted(added), dtype=np.int64)
        plan = splice_plan(keys, np.array(sorted(drop), dtype=np.int64), add)
        spliced = splice(plan, keys, add)
        values = splice(plan, np.array([old[k] for k in keys.tolist()]), np.array([added[k] for k in add.tolist()]))
        pairs = splice(plan, np.column_stack([keys, -keys]), np.column_stack([add, -add]))
        assert spliced.tolist() == sorted(expected)
        assert values.tolist() == [expected[k] for k in sorted(expected)]
        assert pairs.tolist() == [[k, -k] for k in sorted(expected)]


@pytest.mark.parametrize("changes", [3, 40, 2000])  # few marked pairs are patched in; many sort again
def test_patched_arrays_equal_a_sort_of_the_table(changes: int) -> None:
    rng = np.random.default_rng(changes)
    table: dict[tuple[int, int], tuple[int, float]] = {}
    arrays = SortedPairs()
    for _ in range(8):
        for _ in range(changes):
            a, b = sorted(int(x) for x in rng.choice(3000, 2, replace=False))
            if (a, b) in table and rng.random() < 0.5:
                del table[(a, b)]
            else:
                table[(a, b)] = (1, float(rng.random()))
            arrays.mark((a, b))
        got, want = arrays.arrays(table), sorted_table(table)
        assert got[0].dtype == np.int64 and got[0].shape == want[0].shape
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert not got[0].flags.writeable and not got[1].flags.writeable  # shared with views: never changed


def test_edges_patched_after_each_change_equal_lists_built_from_scratch() -> None:
    keys = names(900)
    vectors = HashEmbedder(dim=64).embed(keys)
    lists = SynonymLists(threshold=0.8)
    alive = np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(5)
    for start in range(0, 900, 150):  # batches in, a few phrases out, edges read after each change
        new = np.arange(start, start + 150, dtype=np.int64)
        alive = np.union1d(alive, new)
        lists.add(new, alive, lambda r: vectors[r], keys)
        lists.edges()
        dead = np.sort(rng.choice(alive, 12, replace=False)).astype(np.int64)
        alive = np.setdiff1d(alive, dead)
        lists.remove(dead, alive, lambda r: vectors[r], keys)
        fresh = SynonymLists(threshold=0.8)
        fresh.add(alive, alive, lambda r: vectors[r], keys)
        got, want = lists.edges(), fresh.edges()
        assert len(want[0]) > 20  # the names have synonym pairs
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
