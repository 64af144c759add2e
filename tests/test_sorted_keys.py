"""`SortedKeys`: the canonical order of alive keys and their rows, patched in place or merged in bulk."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.index.state.rows import SortedKeys

KEYS = [f"k{i:02d}" for i in range(40)]
ROWS = {k: (7 * i) % 40 for i, k in enumerate(KEYS)}  # rows unrelated to key order
KEY_OF = {row: key for key, row in ROWS.items()}


def by_rows(alive: set[str]) -> Callable[[np.ndarray], np.ndarray]:
    """The alive-set as `SortedKeys` asks it: which of these rows hold an alive key."""
    return lambda rows: np.array([KEY_OF[r] in alive for r in rows.tolist()], dtype=bool)


batch = st.lists(st.tuples(st.sampled_from(KEYS), st.booleans()), max_size=30)


@pytest.mark.parametrize("bulk", [0, 3, 64])
@settings(max_examples=60, deadline=None)
@given(batches=st.lists(batch, min_size=1, max_size=8))
def test_rows_follow_the_sorted_alive_keys(bulk: int, batches: list[list[tuple[str, bool]]]) -> None:
    order: SortedKeys[str] = SortedKeys()
    order.BULK = bulk
    alive: set[str] = set()
    for changes in batches:
        for key, on in changes:
            (alive.add if on else alive.discard)(key)
            order.touch(key, ROWS[key])
        rows = order.rows(by_rows(alive))
        assert order.keys(by_rows(alive)) == sorted(alive)
        assert rows.tolist() == [ROWS[k] for k in sorted(alive)]


@pytest.mark.parametrize("bulk", [0, 3, 64])
@settings(max_examples=60, deadline=None)
@given(start=st.sets(st.sampled_from(KEYS)), batches=st.lists(batch, min_size=1, max_size=8))
def test_a_restored_order_is_patched_without_its_key_list(
    bulk: int, start: set[str], batches: list[list[tuple[str, bool]]]
) -> None:
    """A restored order (rows only, keys read one at a time by `key_of`) gives the same rows as the sorted
    alive keys; a few changes at once never make the key list, many do."""
    key_of = KEY_OF.__getitem__
    order: SortedKeys[str] = SortedKeys()
    order.BULK = bulk
    order.restore(np.array([ROWS[k] for k in sorted(start)], dtype=np.int64), key_of)
    alive, many = set(start), False
    for changes in batches:
        before = set(alive)
        for key, on in changes:
            (alive.add if on else alive.discard)(key)
            order.touch(key, ROWS[key])
        many = many or len(before ^ alive) > bulk
        assert order.rows(by_rows(alive)).tolist() == [ROWS[k] for k in sorted(alive)]
        assert (order._keys is None) == (not many)
    assert order.keys(by_rows(alive)) == sorted(alive)
