"""engram.index.view.node_maps: where each canonical node went, by a walk through both orders, against the marks over
the row space (the oracle) on random changes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.index.view import node_maps as maps_module
from engram.index.view.node_maps import by_marks, node_maps


def orders(seed: int, size: int, changes: int) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, str]]]:
    """Two canonical orders of rows (sorted by a random key per row; phrases, rows below half, first), the
    second with `changes` rows taken out or put in."""
    rng = np.random.default_rng(seed)
    names = [f"k{v:08d}" for v in rng.permutation(10**6)[:size]]  # unique keys, in no relation to the rows
    keys = {row: (0 if row < size // 2 else 1, names[row]) for row in range(size)}
    alive = rng.random(size) < 0.7
    before = alive.copy()
    flip = rng.choice(size, min(changes, size), replace=False)
    alive[flip] = ~alive[flip]

    def order(mask: np.ndarray) -> np.ndarray:
        return np.array(sorted(np.flatnonzero(mask).tolist(), key=keys.__getitem__), dtype=np.int64)

    return order(before), order(alive), keys


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 400), st.integers(0, 40), st.sampled_from([1, 2, 64]))
def test_node_maps_equal_the_marks(seed: int, size: int, changes: int, first_run: int) -> None:
    old, new, keys = orders(seed, size, changes)
    saved = maps_module.FIRST_RUN
    maps_module.FIRST_RUN = first_run  # runs found over many slice lengths
    try:
        got = node_maps(old, new, size, keys.__getitem__)
    finally:
        maps_module.FIRST_RUN = saved
    expected = by_marks(old, new, size)
    assert got is not None and expected is not None
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def test_many_changes_and_a_key_of_two_rows_fall_back_to_the_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def counted(*args: Any) -> Any:
        calls.append(1)
        return by_marks(*args)

    monkeypatch.setattr(maps_module, "by_marks", counted)
    old, new, keys = orders(3, 2000, 600)  # more than FEW_EDITS
    got = node_maps(old, new, 2000, keys.__getitem__)
    expected = by_marks(old, new, 2000)
    assert calls and got is not None and expected is not None and np.array_equal(got[0], expected[0])
    calls.clear()
    same = {0: (0, "a"), 1: (0, "b"), 2: (0, "c"), 3: (0, "b")}  # rows 1 and 3 claim one key
    node_maps(np.array([0, 1, 2], dtype=np.int64), np.array([0, 3, 2], dtype=np.int64), 4, same.__getitem__)
    assert calls
