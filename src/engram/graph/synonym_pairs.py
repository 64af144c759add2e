"""Candidate pairs of the approximate synonym search (engram.graph.synonyms), as arrays of phrase rows.

A search gives (searched row, hit) pairs; `oriented` turns them into the pairs to confirm, each once, seen from
a searched row. `through_lists` adds the pairs a search can no longer give: the HNSW graph prunes the
neighbour lists of its old entries as later ones link to them, so a row that its own search returned when it
was added may be reached by no search after a later batch. It still sits on the synonym lists of the near
copies it had then, so each searched row is also paired with the list members of the earlier rows it hit
(checked by exact cosine like any candidate: a candidate more never changes a list that the exact search
would not give).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Pairs = tuple[IntArray, IntArray]  # (searched rows, candidate rows), position by position
Neighbour = tuple[float, str, int]  # (cosine, key, row)


def _joined(pairs: Sequence[Pairs]) -> Pairs:
    empty = np.zeros(0, dtype=np.int64)
    return np.concatenate([empty, *(p[0] for p in pairs)]), np.concatenate([empty, *(p[1] for p in pairs)])


def oriented(pairs: Sequence[Pairs], searched: BoolArray, wanted: BoolArray) -> Pairs:
    """The distinct (searched row, wanted row) pairs among `pairs`, including those found the other way round
    (a hit that was searched too: the pair seen from its side); rows are below `len(wanted)`, sorted by pair."""
    top = len(wanted)
    q_rows, t_rows = _joined(pairs)
    back = (t_rows >= 0) & (t_rows < top)
    back[back] = searched[t_rows[back]]
    q_rows, t_rows = np.concatenate([q_rows, t_rows[back]]), np.concatenate([t_rows, q_rows[back]])
    keep = (t_rows >= 0) & (t_rows < top) & (q_rows != t_rows)
    keep[keep] = wanted[t_rows[keep]]
    pair = np.unique(q_rows[keep] * top + t_rows[keep])
    return pair // top, pair % top


def through_lists(pairs: Sequence[Pairs], searched: BoolArray, lists: Mapping[int, list[Neighbour]]) -> Pairs:
    """(searched row, member) for each hit of a searched row that was not searched now and each member of
    that hit's synonym list."""
    top = len(searched)
    q_rows, t_rows = _joined(pairs)
    old = (t_rows >= 0) & (t_rows < top)
    old[old] = ~searched[t_rows[old]]
    q_rows, t_rows = q_rows[old], t_rows[old]
    hits = np.unique(t_rows)
    members = [np.array([n[2] for n in lists.get(h, [])], dtype=np.int64) for h in hits.tolist()]
    lengths = np.array([len(m) for m in members], dtype=np.int64)
    flat = np.concatenate([np.zeros(0, dtype=np.int64), *members])
    starts = np.cumsum(lengths) - lengths
    at = np.searchsorted(hits, t_rows)
    counts = lengths[at]
    first = np.repeat(starts[at], counts)
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(q_rows, counts), flat[first + within]
