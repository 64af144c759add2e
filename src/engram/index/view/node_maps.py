"""Where each node of the last view's canonical order went in the next one (engram.index.view.edges' patch).

Both orders hold the alive nodes sorted by key (phrases by name, then passages by id), and a node's row never
changes, so after a few changes the new order is the old one with a few nodes taken out and a few put in.
`node_maps` finds those by walking both orders at once: runs of equal rows are found by comparing slices of
growing length (a few whole-array passes in all), and at each mismatch the two nodes' keys say which side has
the node the other lacks. Many changes at once fall back to marks over the row space (`by_marks`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
Key = tuple[int, str]
FEW_EDITS = 256  # nodes taken out or put in, at most, for the walk through both orders
FIRST_RUN = 64  # entries compared first at each run (then 4 times as many each time)


def node_maps(
    old_nodes: IntArray, node_rows: IntArray, size: int, key_of: Callable[[int], Key]
) -> tuple[IntArray, IntArray] | None:
    """(old canonical position -> new, new -> old), -1 for nodes gone and nodes new, or None when the nodes in
    both orders are not in the same relative order. `key_of(row)` is the key the orders are sorted by."""
    runs = _common_runs(old_nodes, node_rows, key_of)
    if runs is None:
        return by_marks(old_nodes, node_rows, size)
    remap, old_of = np.full(len(old_nodes), -1, dtype=np.int64), np.full(len(node_rows), -1, dtype=np.int64)
    for old_start, new_start, length in runs:
        remap[old_start : old_start + length] = np.arange(new_start, new_start + length, dtype=np.int64)
        old_of[new_start : new_start + length] = np.arange(old_start, old_start + length, dtype=np.int64)
    return remap, old_of


def _common_runs(old: IntArray, new: IntArray, key_of: Callable[[int], Key]) -> list[tuple[int, int, int]] | None:
    """(old start, new start, length) of the runs of nodes both orders hold, in order; None past `FEW_EDITS`
    nodes taken out or put in, or when one key stands for two rows (the orders cannot be merged by key)."""
    runs: list[tuple[int, int, int]] = []
    i = j = edits = 0
    while i < len(old) and j < len(new):
        length = _equal_run(old, new, i, j)
        if length:
            runs.append((i, j, length))
            i, j = i + length, j + length
            if i == len(old) or j == len(new):
                break
        gone, added = key_of(int(old[i])), key_of(int(new[j]))
        if gone == added:
            return None
        if gone < added:  # the new order, sorted, holds no such key any more
            i += 1
        else:
            j += 1
        edits += 1
        if edits > FEW_EDITS:
            return None
    return runs


def _equal_run(old: IntArray, new: IntArray, i: int, j: int) -> int:
    """How many entries from old[i] and new[j] on are equal, pair by pair."""
    n = min(len(old) - i, len(new) - j)
    done, step = 0, FIRST_RUN
    while done < n:
        m = min(step, n - done)
        differ = np.flatnonzero(old[i + done : i + done + m] != new[j + done : j + done + m])
        if len(differ):
            return done + int(differ[0])
        done, step = done + m, step * 4
    return n


def by_marks(old_nodes: IntArray, node_rows: IntArray, size: int) -> tuple[IntArray, IntArray] | None:
    """`node_maps` by marks over the row space and runs in order, for many changes at once (instead of
    positions scattered over the row space: the canonical order is by name, so such writes land anywhere)."""
    in_new, in_old = np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
    in_new[node_rows], in_old[old_nodes] = True, True
    kept, was = in_new[old_nodes], in_old[node_rows]  # by old position: still there; by new: there before
    if not np.array_equal(old_nodes[kept], node_rows[was]):
        return None
    remap, old_of = np.full(len(old_nodes), -1, dtype=np.int64), np.full(len(node_rows), -1, dtype=np.int64)
    remap[kept], old_of[was] = np.flatnonzero(was), np.flatnonzero(kept)
    return remap, old_of
