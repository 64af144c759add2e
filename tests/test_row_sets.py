"""Issue 11: a restored state's per-passage fact sets written back as arrays (`RowSets.flat`) without making a
set per passage: the saved arrays' spans copied, only the replaced and appended sets sorted. Oracle: every set
kept in a plain list by the test, sorted and concatenated."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.index.state.saved_tables import RowSets

sets = st.frozensets(st.integers(0, 40), max_size=6)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("replace"), st.integers(-30, 30), sets),
        st.tuples(st.just("read"), st.integers(-30, 30), st.just(frozenset())),
        st.tuples(st.just("append"), st.just(0), sets),
    ),
    max_size=12,
)


def arrays(model: list[frozenset[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = [len(s) for s in model]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.array([r for s in model for r in sorted(s)], dtype=np.int64)
    return offsets, rows


@settings(max_examples=300, deadline=None)
@given(st.lists(sets, max_size=8), ops, st.booleans())
def test_flat_equals_the_sets_one_after_another(saved: list[frozenset[int]], changes: list, restore: bool) -> None:
    table = RowSets()
    model = list(saved)
    if restore:
        table.restore(*arrays(saved))
    else:
        for value in saved:
            table.append(value)
    for kind, index, value in changes:
        if kind == "append":
            table.append(value)
            model.append(value)
        elif model and -len(model) <= index < len(model):
            if kind == "replace":
                table[index] = value
                model[index] = value
            else:
                assert table[index] == model[index]
    offsets, rows = table.flat()
    want_offsets, want_rows = arrays(model)
    assert offsets.dtype == rows.dtype == np.int64
    assert np.array_equal(offsets, want_offsets) and np.array_equal(rows, want_rows)
