"""The edge arrays of a view - relation table, context table and the canonical adjacency the walk is made of -
built from the state, or patched from the previous view's when few edges changed since (the state's
`StateCaches`: its patch base and what was touched since).

Patching keeps the previous arrays' untouched entries and merges the touched ones in, recomputed as a build
computes them: a relation pair's support, a synonym pair's cosine, a passage's context edges, and a pair's
relation and synonym weights summed (two terms: the same float in either order). The canonical positions of the
surviving nodes only shift when keys are inserted or removed before them, which keeps every row's columns in
order, so the patched matrix is the built one entry for entry, to the bit (tests/test_view_patch.py). A patch is
O(non-zeros) in slice copies instead of a sort of every edge (the walk's scaling is redone only around the rows
that changed, engram.graph.ppr.patched_walk); past `Touched.limit` changes it rebuilds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.graph.csr import row_entries
from engram.graph.pair_arrays import pair_keys, splice, splice_plan
from engram.graph.ppr import SymmetricWalk, patched_walk, symmetric_walk
from engram.index.state.index_state import IndexState
from engram.index.state.patch_base import PatchBase
from engram.index.view.csr_assembly import assemble
from engram.index.view.node_maps import node_maps
from engram.index.view.saved_walk import current_base
from engram.store.records import PassageRow

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Edges:
    relation: IntArray  # (R, 2) phrase pairs i < j, sorted
    support: FloatArray
    relation_keys: IntArray  # the pairs' `pair_keys`, for the next patch's searches
    context: IntArray  # (C, 2) (passage row, phrase row) of alive passages, by passage row then phrase row
    phrase_passages: FloatArray  # by phrase row: the passages of `context` it is in (a bincount, as floats)
    adjacency: sp.csr_matrix  # over the alive nodes in canonical order, unnormalised
    walk: SymmetricWalk  # the adjacency's walk (patched from the last view's along with the adjacency)
    patched: bool


def derive_edges(
    state: IndexState, alive: BoolArray, node_rows: IntArray, synonyms: tuple[IntArray, FloatArray]
) -> Edges:
    """The view's edge arrays (patched when the state holds a base and its changes), kept as the next base."""
    if state.caches.base_check is not None:  # a restored base: used once its files' checksums match
        check, state.caches.base_check = state.caches.base_check, None
        if not check.passed():
            state.caches.forget_patch_base()
    base, touched, n_phrases = state.caches.patch_base, state.caches.touched, len(state.phrases)
    size, weight = n_phrases + len(state.passages), state.config.context_weight
    syn_touched = state.synonyms.touched
    edges: Edges | None = None
    if (same := current_base(state, node_rows)) is not None:  # nothing changed since: its arrays as they are
        edges = Edges(same.relation, same.support, same.relation_keys, same.context, same.phrase_passages,
                      same.adjacency, same.walk, True)  # fmt: skip
    elif base is not None and touched is not None and syn_touched is not None and len(syn_touched) <= touched.limit:
        relation, support, keys = _patch_relation(base, touched.relation, state.relation)
        context, counts = _patch_context(base, touched.passages, state, alive)
        patched = _patch_adjacency(base, touched.passages, touched.relation | syn_touched, state, node_rows, size)
        if patched is not None:
            edges = Edges(relation, support, keys, context, counts, *patched, True)
    if edges is None:
        context = _context_table(state, alive)
        counts = np.bincount(context[:, 1], minlength=n_phrases).astype(np.float64)
        relation, support = _relation_table(state)
        adjacency = _canonical_adjacency(relation, support, context, synonyms, node_rows, n_phrases, size, weight)
        walk = symmetric_walk(adjacency)
        edges = Edges(relation, support, pair_keys(relation), context, counts, adjacency, walk, False)
    edges.phrase_passages.setflags(write=False)  # the view's and the next patch's base: shared, never changed
    kept = PatchBase(edges.adjacency, node_rows, n_phrases, edges.relation, edges.support, edges.relation_keys,
                     edges.context, edges.phrase_passages, edges.walk)  # fmt: skip
    state.caches.keep_patch_base(kept)
    return edges


# building ---------------------------------------------------------------------------------------------------
def _canonical_adjacency(
    relation: IntArray,
    support: FloatArray,
    context: IntArray,
    synonyms: tuple[IntArray, FloatArray],
    node_rows: IntArray,
    n_phrases: int,
    size: int,
    weight: float,
) -> sp.csr_matrix:
    """The adjacency over the alive nodes in canonical order (node i is row-space node `node_rows[i]`), built
    straight from the edge tables: each edge once per direction, a pair's relation and synonym weights summed
    (two terms, so in either order the same float), column indices sorted. Equal to the row-space adjacency
    permuted, without building and permuting it."""
    position = np.full(size, -1, dtype=np.int64)  # row-space node -> canonical node (-1: dead)
    position[node_rows] = np.arange(len(node_rows), dtype=np.int64)
    pairs, weights = synonyms
    src = np.concatenate([relation[:, 0], pairs[:, 0], context[:, 1]])
    dst = np.concatenate([relation[:, 1], pairs[:, 1], context[:, 0] + n_phrases])
    w = np.concatenate([support, weights, np.full(len(context), weight, dtype=np.float64)])
    a, b = position[src], position[dst]
    keep = (a >= 0) & (b >= 0)  # edges of dead nodes (none expected) are left out, as the permutation did
    a, b, w = a[keep], b[keep], w[keep]
    n = len(node_rows)
    matrix = sp.csr_matrix((np.concatenate([w, w]), (np.concatenate([a, b]), np.concatenate([b, a]))), shape=(n, n))
    matrix.sum_duplicates()
    return matrix


def _pairs(pairs: Iterable[tuple[int, int]], count: int) -> IntArray:
    """(count, 2) int64 array of int pairs (without a Python object per element, unlike np.array)."""
    return np.fromiter(itertools.chain.from_iterable(pairs), dtype=np.int64, count=2 * count).reshape(-1, 2)


def _context_table(state: IndexState, alive: BoolArray) -> IntArray:
    """(passage row, phrase row) of every alive passage's context edges, by passage row."""
    rows = [i for i in np.flatnonzero(alive).tolist() if len(state.passage_context[i])]
    return _context_of(state, rows)


def _context_of(state: IndexState, rows: list[int]) -> IntArray:
    if not rows:
        return np.zeros((0, 2), dtype=np.int64)
    linked = [state.passage_context[i] for i in rows]
    lengths = np.fromiter(map(len, linked), dtype=np.int64, count=len(rows))
    passages = np.repeat(np.array(rows, dtype=np.int64), lengths)
    return np.column_stack([passages, np.concatenate(linked).astype(np.int64)])


def _relation_table(state: IndexState) -> tuple[IntArray, FloatArray]:
    """Relation pairs in sorted order and their support."""
    pairs, counts = state.relation.arrays()
    return pairs.copy(), counts.astype(np.float64)


# patching ---------------------------------------------------------------------------------------------------
def _patch_relation(
    base: PatchBase, touched: set[tuple[int, int]], relation: Mapping[tuple[int, int], int]
) -> tuple[IntArray, FloatArray, IntArray]:
    """The relation table (pairs, support, pair keys) with the touched pairs taken out and those still related
    put back with their current support: slice copies of the untouched runs (engram.graph.pair_arrays.splice)."""
    pairs = sorted(touched)
    drop = pair_keys(_pairs(pairs, len(pairs)))
    now = [p for p in pairs if p in relation]
    added = _pairs(now, len(now))
    add = pair_keys(added)
    plan = splice_plan(base.relation_keys, drop, add)
    support = np.array([float(relation[p]) for p in now], dtype=np.float64)
    keys = splice(plan, base.relation_keys, add)
    return splice(plan, base.relation, added), splice(plan, base.support, support), keys


def _patch_context(
    base: PatchBase, passages: set[int], state: IndexState, alive: BoolArray
) -> tuple[IntArray, FloatArray]:
    """The context table (sorted by passage row) with each touched passage's run of rows replaced by its
    current ones, and the phrases' passage counts moved by the runs taken out and put in: one copy of the
    untouched runs, no pass over every row (counts are whole numbers, so the floats are a bincount's)."""
    context, touched = base.context, sorted(passages)
    counts = np.zeros(len(state.phrases), dtype=np.float64)
    counts[: len(base.phrase_passages)] = base.phrase_passages
    starts = np.searchsorted(context[:, 0], touched, side="left").tolist()
    ends = np.searchsorted(context[:, 0], touched, side="right").tolist()
    parts, done = [], 0
    for passage, start, end in zip(touched, starts, ends):
        parts.append(context[done:start])
        np.subtract.at(counts, context[start:end, 1], 1.0)
        if alive[passage] and len(state.passage_context[passage]):
            parts.append(_context_of(state, [passage]))
            np.add.at(counts, parts[-1][:, 1], 1.0)
        done = end
    parts.append(context[done:])
    return np.concatenate(parts).reshape(-1, 2).astype(np.int64, copy=False), counts


def _patch_adjacency(
    base: PatchBase, passages: set[int], pairs: set[tuple[int, int]], state: IndexState, node_rows: IntArray, size: int
) -> tuple[sp.csr_matrix, SymmetricWalk] | None:
    """The previous canonical adjacency with the entries of touched passages and phrase pairs (and of nodes that
    died) replaced by their current ones, over the new canonical order, and its walk (patched from the previous
    one: engram.graph.ppr.patched_walk); None when surviving nodes changed their order (never expected: the
    caller then builds).

    Only the rows that change are taken apart: those of dead nodes and touched passages, their neighbours, the
    ends of touched pairs and of the fresh entries. Every other row keeps its entries as they are, its columns
    moved to their new positions (surviving nodes keep their order, so its columns stay sorted), in a few
    whole-array passes instead of a sort or a search of every entry."""
    n_phrases, old = len(state.phrases), base.adjacency
    n_new = len(node_rows)
    old_nodes = _in_row_space(base.node_rows, base.n_phrases, n_phrases)
    maps = node_maps(old_nodes, node_rows, size, partial(_key_of, state.phrases, state.passages))
    if maps is None:
        return None  # copied rows would lose their column order
    remap, old_of = maps  # old canonical position -> new, new -> old (-1: gone, new)
    cleared = remap < 0  # gone nodes and touched passages lose every entry
    ordered = sorted(pairs)
    passage_nodes = np.array(sorted(passages), dtype=np.int64) + n_phrases
    at = _positions(old_nodes, np.concatenate([passage_nodes, _pairs(ordered, len(ordered)).ravel()]), size)
    touched, pair_rows = at[: len(passage_nodes)], at[len(passage_nodes) :].reshape(-1, 2)  # old positions
    cleared[touched[touched >= 0]] = True
    add, add_data = _fresh_entries(state, ordered, passages, partial(_positions, node_rows, size=size), n_new)
    redo = cleared.copy()  # rows rebuilt: cleared ones, their neighbours, ends of touched pairs and fresh entries
    redo[old.indices[row_entries(old.indptr, np.flatnonzero(cleared))[0]]] = True
    redo[pair_rows[pair_rows >= 0]] = True
    fresh_rows = old_of[add // n_new]
    redo[fresh_rows[fresh_rows >= 0]] = True
    kept, kept_data = _kept_entries(old, np.flatnonzero(redo & (remap >= 0)), cleared, pair_rows, remap, n_new)
    keys = np.concatenate([kept, add])
    order = np.argsort(keys, kind="stable")
    keys, data = keys[order], np.concatenate([kept_data, add_data])[order]
    walk = base.walk.matrix.data
    matrix, carried, copied, runs = assemble(old, walk, remap, old_of, redo, keys, data, n_new, state.caches.spares)
    return matrix, patched_walk(matrix, base.walk, old_of, copied, carried, runs)


def _in_row_space(old_nodes: IntArray, old_phrases: int, n_phrases: int) -> IntArray:
    """The last view's canonical nodes as rows of the current row space (passage rows come after the phrase rows,
    which may have grown): its phrase nodes come first, so one binary search finds where to shift."""
    if old_phrases == n_phrases:
        return old_nodes
    lo, hi = 0, len(old_nodes)
    while lo < hi:
        mid = (lo + hi) // 2
        if old_nodes[mid] >= old_phrases:
            hi = mid
        else:
            lo = mid + 1
    return np.concatenate([old_nodes[:lo], old_nodes[lo:] + (n_phrases - old_phrases)])


def _key_of(phrases: Sequence[str], passages: Sequence[PassageRow], row: int) -> tuple[int, str]:
    """The key a canonical node is sorted by: phrase nodes by name, then passage nodes by id."""
    return (0, phrases[row]) if row < len(phrases) else (1, passages[row - len(phrases)].id)


def _positions(order: IntArray, rows: IntArray, size: int) -> IntArray:
    """The positions in `order` (rows of the row space, each once) of a few `rows` (-1: not in it)."""
    wanted = np.zeros(size, dtype=bool)
    wanted[rows] = True
    at = np.flatnonzero(wanted[order])
    found = order[at]
    by_row = np.argsort(found)
    found, at = found[by_row], at[by_row]
    i = np.minimum(np.searchsorted(found, rows), max(len(found) - 1, 0))
    hit = found[i] == rows if len(found) else np.zeros(len(rows), dtype=bool)
    out: IntArray = np.where(hit, at[i] if len(found) else -1, -1).astype(np.int64)
    return out


def _kept_entries(
    old: sp.csr_matrix, rows: IntArray, cleared: BoolArray, pair_rows: IntArray, remap: IntArray, n_new: int
) -> tuple[IntArray, FloatArray]:
    """The entries of the rebuilt surviving `rows` that stay (not in a cleared row or column, not a touched
    pair), as sorted new-space keys (row * n_new + column) and their weights."""
    at = row_entries(old.indptr, rows)[0]
    r = np.repeat(rows, np.diff(old.indptr)[rows])
    c = old.indices[at].astype(np.int64)
    drop = cleared[r] | cleared[c]
    n_old = len(remap)
    pairs = pair_rows[(pair_rows >= 0).all(axis=1)]
    touched = np.concatenate([pairs[:, 0] * n_old + pairs[:, 1], pairs[:, 1] * n_old + pairs[:, 0]])
    drop |= np.isin(r * n_old + c, touched)
    keep = ~drop
    keys: IntArray = remap[r[keep]] * n_new + remap[c[keep]]
    return keys, old.data[at[keep]]


def _fresh_entries(
    state: IndexState,
    pairs: list[tuple[int, int]],
    passages: set[int],
    position: Callable[[IntArray], IntArray],
    n_new: int,
) -> tuple[IntArray, FloatArray]:
    """Sorted keys (row * n_new + column, both directions) and weights of the touched edges as they stand."""
    src: list[int] = []
    dst: list[int] = []
    weights: list[float] = []
    for pair in pairs:
        support, cosine = state.relation.get(pair), state.synonyms.weight(pair)
        if support is None and cosine is None:
            continue
        if support is not None and cosine is not None:
            weights.append(float(support) + cosine)  # a build sums the two entries: the same float
        else:
            weights.append(float(support) if support is not None else float(cosine or 0.0))
        src.append(pair[0])
        dst.append(pair[1])
    weight, n_phrases = state.config.context_weight, len(state.phrases)
    for p in sorted(passages):
        if state.passage_alive[p]:
            linked = state.passage_context[p].tolist()
            src.extend(linked)
            dst.extend([n_phrases + p] * len(linked))
            weights.extend([weight] * len(linked))
    ends = position(np.array(src + dst, dtype=np.int64))  # new canonical positions (-1: not a node now)
    a, b = ends[: len(src)], ends[len(src) :]
    w = np.array(weights, dtype=np.float64)
    ok = (a >= 0) & (b >= 0)
    a, b, w = a[ok], b[ok], w[ok]
    keys = np.concatenate([a * n_new + b, b * n_new + a])
    order = np.argsort(keys, kind="stable")
    return keys[order], np.concatenate([w, w])[order]
