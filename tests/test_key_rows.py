"""`KeyRows` (engram.index.state.key_rows): key -> row of an append-only list, by a saved hash table after a restore.

Oracle: a dict of every key to its index in the list."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engram.index.state.key_rows as key_rows
from engram.index.state.key_rows import KeyRows

words = st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=40)


def filled(keys: list[str]) -> KeyRows:
    listed: list[str] = []
    table = KeyRows(listed)
    for key in keys:
        table[key] = len(listed)
        listed.append(key)
    return table


def restored(saved: KeyRows, table: bool = True) -> KeyRows:
    """A new table over a copy of `saved`'s list, restored from its saved hashes (or without them)."""
    out = KeyRows(list(saved.listed))
    out.restore(len(saved.listed), saved.saved() if table else None)
    return out


def agrees(table: KeyRows, keys: list[str], absent: list[str]) -> None:
    oracle = {k: i for i, k in enumerate(keys)}
    assert dict(table) == oracle and len(table) == len(oracle)
    assert all(table[k] == i and k in table for k, i in oracle.items())
    for key in absent:
        if key not in oracle:
            assert table.get(key) is None and key not in table
            with pytest.raises(KeyError):
                table[key]


@settings(max_examples=80, deadline=None)
@given(first=words, second=words, absent=words)
def test_restored_rows_and_later_keys_are_found(first: list[str], second: list[str], absent: list[str]) -> None:
    table = restored(filled(first))
    assert not table._added  # the restored keys are searched by hash, not put in a dict
    agrees(table, first, absent)
    keys = list(first)
    for key in second:  # keys added after the restore, then saved and restored again
        if table.get(key) is None:
            table[key] = len(table.listed)
            table.listed.append(key)
            keys.append(key)
    agrees(table, keys, absent)
    agrees(restored(table), keys, absent)
    agrees(restored(table, table=False), keys, absent)  # a state saved before the tables: a dict, as before


def test_colliding_hashes_are_told_apart_by_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys whose hashes collide each get their own row (the string at each row of that hash is compared)."""
    monkeypatch.setattr(key_rows, "key_hash", lambda key: len(key) % 3)
    keys = [f"k{i}" * (1 + i % 4) for i in range(30)]
    table = restored(filled(keys))
    hashes, _ = table.saved()
    assert len(set(hashes.tolist())) == 3
    agrees(table, keys, ["k0k0k0", "x", "zz", "k29k29"])


def test_the_saved_table_is_the_sorted_hashes_with_rows() -> None:
    keys = ["north river", "old mill", "aschenbrödel", "Anna Berg"]
    hashes, rows = filled(keys).saved()
    assert hashes.tolist() == sorted(key_rows.key_hash(k) for k in keys)
    assert [key_rows.key_hash(keys[r]) for r in rows.tolist()] == hashes.tolist()


def test_a_damaged_table_is_refused() -> None:
    keys = ["a", "b", "c"]
    hashes, rows = filled(keys).saved()
    assert len(set(hashes.tolist())) == 3  # so reversed they are not sorted
    for bad in [(hashes[::-1], rows[::-1]), (hashes, np.array([0, 0, 1])), (hashes[:2], rows[:2])]:
        with pytest.raises(ValueError):
            KeyRows(list(keys)).restore(3, bad)
    with pytest.raises(ValueError):
        KeyRows(["a", "a"]).restore(2, None)  # keys that are not distinct
