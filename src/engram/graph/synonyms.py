"""Synonym neighbour lists, maintained incrementally.

Each alive phrase keeps its `top_k` nearest alive phrases whose cosine is >= `threshold`; a synonym edge joins
two phrases when either keeps the other. Cosines are recomputed exactly (float64 from the float32 vectors) and
rounded to 1e-9 for every candidate pair, and ties are broken by phrase key, so the lists - and the edges - do not
depend on the order phrases arrived in: inserting or deleting phrases one batch at a time gives exactly what a
build from scratch gives. Memory is O(block x phrases), never phrases².

With `ann_min_rows` set, candidates come from an approximate nearest-neighbour index (`engram.graph.ann`) once
`ann_min_rows` phrases are searched and that is cheaper (0: always) instead of scoring every phrase: exact
all-pairs search is quadratic, which a large memory's build cannot afford. The candidates' cosines are then
recomputed exactly, as above, so a list is the exact one whenever the index returns the true neighbours (recall
measured in bench/bench_ann.py, tested in tests/test_ann.py); otherwise the search is exact. A pair that one
side's search finds counts for both sides. A phrase that the search for its own vector does not return is one no
search reaches (the graph's pruning cuts a few off in groups of near copies): it is noted in the index's `lost`
set (saved with the index), and phrases searched later are paired with the lost ones too: a few by comparing them
with every lost phrase exactly, many (a build's batch) by the earlier lost phrases' own wide searches, read the
other way round, or, where that costs more, by searching a graph of the lost phrases alone (built in RAM when
first needed); plus an exact comparison of the phrases lost now with every lost phrase (no search finds such a
pair from either side).
A phrase that the graph stops reaching when later phrases are added (its own search found it when it came) is
paired through the lists of the earlier phrases a search hits (`engram.graph.synonym_pairs.through_lists`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.graph.ann import AnnIndex
from engram.graph.pair_arrays import SortedPairs
from engram.graph.synonym_pairs import Neighbour, Pairs, oriented, through_lists
from engram.graph.synonym_tables import EdgeTable, IncomingTable, ListTable, SavedLists

IntArray = npt.NDArray[np.int64]
VectorsOf = Callable[[IntArray], npt.NDArray[np.float32]]

SLACK = 1e-4  # float32 candidates within this of the threshold are re-checked exactly
ANN_FIRST_K = 16  # neighbours asked of the ANN index per phrase at first (widened while all of them pass)
ANN_ROW_COST = 2000  # adding or searching one row of an HNSW index costs about this many exact cosines
# a row that its own search does not return lies where the graph is poorly linked, and its search misses
# neighbours that a wider one finds (bench/README.md): lost rows search this wide
LOST_K = 256
# costs in exact cosines, as ANN_ROW_COST: a search LOST_K wide costs about 6.5 searches ANN_FIRST_K wide, one in
# the graph of the lost rows alone about half of one (timed over 900,000 hash-embedded phrases added in 5 batches)
WIDE_ROW_COST = 13_000
LOST_GRAPH_ROW_COST = 1_000
# candidate pairs re-checked at a time: each side's vectors in float64 are 8,192 x 384 x 8 bytes = 24 MiB (65,536
# pairs were 0.4 GB at once, the anonymous memory peak of a 100k build)
CONFIRM_PAIRS = 8_192


class SynonymLists:
    def __init__(
        self, threshold: float = 0.8, top_k: int = 100, block: int = 1024, ann_min_rows: int | None = None
    ) -> None:
        self.threshold = threshold
        self.top_k = top_k
        self.block = block
        self.ann_min_rows = ann_min_rows
        self.ann: AnnIndex | None = None  # over the phrase rows marked in ann_present, built on first use
        self.ann_present = np.zeros(0, dtype=bool)
        self.ann_loader: Callable[[], object] | None = None  # loads a saved index (adopt_ann) when first needed
        self.touched: set[tuple[int, int]] | None = None  # pairs whose edge changed, while recorded (index.patch)
        self.lists = ListTable()  # row -> its list (no entry: none)
        self.incoming = IncomingTable()  # row -> the rows whose lists hold it
        self._edges = EdgeTable()  # pair -> (lists holding it, cosine)
        self._edge_arrays = SortedPairs()  # `edges` of the table, patched by the pairs `_set` changes

    def _order(self, items: Iterable[Neighbour]) -> list[Neighbour]:
        return sorted(items, key=lambda n: (-n[0], n[1]))[: self.top_k]

    def _candidates(
        self, rows: IntArray, targets: IntArray, vectors: VectorsOf, keys: Sequence[str]
    ) -> dict[int, list[Neighbour]]:
        """For each row, the targets (other than itself) with exact cosine >= threshold."""
        found: dict[int, list[Neighbour]] = {int(r): [] for r in rows}
        if len(targets) == 0:
            return found
        if self._use_ann(len(rows), targets):
            self._ann_candidates(found, rows, targets, vectors, keys)
            return found
        # mostly alive targets: score the whole run of rows they span (no gathered copy of the vectors, which
        # would cost O(phrases) per insert) and drop the others; else gather the targets
        lo, hi = int(targets[0]), int(targets[-1]) + 1
        spanned = 2 * len(targets) >= hi - lo
        target_vectors = vectors(np.arange(lo, hi, dtype=np.int64) if spanned else targets)
        wanted = np.zeros(hi - lo, dtype=bool)
        wanted[targets - lo] = True
        for start in range(0, len(rows), self.block):
            block = rows[start : start + self.block]
            query = vectors(block)
            qi, ti = np.nonzero(query @ target_vectors.T >= self.threshold - SLACK)
            if spanned:
                keep = wanted[ti]
                qi, ti = qi[keep], ti[keep]
            # float64 only for the candidate pairs (converting every target costs O(phrases) per insert)
            pairs = (query[qi].astype(np.float64), target_vectors[ti].astype(np.float64))
            exact = np.round(np.einsum("ij,ij->i", *pairs), 9)
            hits = (ti + lo if spanned else targets[ti]).tolist()
            for q, t, sim in zip(block[qi].tolist(), hits, exact.tolist()):
                if q != t and sim >= self.threshold:
                    found[q].append((sim, keys[t], t))
        return found

    def _use_ann(self, n_rows: int, targets: IntArray) -> bool:
        """ANN when at least `ann_min_rows` targets are searched and it is cheaper than exact search: scoring
        n_rows x targets cosines, against adding the rows the index lacks and searching n_rows (a few new phrases
        on a memory whose index is not built yet are searched exactly; a large batch builds it). `ann_min_rows`
        0 forces ANN."""
        if self.ann_min_rows is None or len(targets) < self.ann_min_rows:
            return False
        self._load_saved_ann()
        if self.ann_min_rows == 0:
            return True
        top = int(targets[-1]) + 1
        held = int(np.count_nonzero(self.ann_present[:top]))
        return n_rows * len(targets) > ANN_ROW_COST * (top - held + n_rows)

    def _ann_candidates(
        self,
        found: dict[int, list[Neighbour]],
        rows: IntArray,
        targets: IntArray,
        vectors: VectorsOf,
        keys: Sequence[str],
    ) -> None:
        """`_candidates` through the ANN index: its hits near the threshold, kept when their exact cosine
        (computed as in the exact search) passes."""
        top = int(max(targets[-1], rows.max())) + 1
        index = self.ann_index(vectors, top)
        wanted = np.zeros(top, dtype=bool)
        wanted[targets] = True
        searched = np.zeros(top, dtype=bool)
        searched[rows] = True
        pairs = self._searched(index, rows, ANN_FIRST_K, vectors)
        lost_now = _missed(pairs, rows)
        index.lost.update(lost_now.tolist())  # its own search missed it: no search reaches it
        pairs.extend(self._searched(index, lost_now, LOST_K, vectors))  # its neighbourhood, searched wider
        pairs.extend(self._lost_pairs(index, rows, searched, vectors))
        pairs.append(through_lists(pairs, searched, self.lists))  # rows the graph stopped reaching since
        self._confirm(found, pairs, searched, wanted, vectors, keys)

    def _confirm(
        self,
        found: dict[int, list[Neighbour]],
        pairs: list[Pairs],
        searched: npt.NDArray[np.bool_],
        wanted: npt.NDArray[np.bool_],
        vectors: VectorsOf,
        keys: Sequence[str],
    ) -> None:
        """Add to `found` the candidate pairs whose exact cosine passes, each once: pairs of a searched row and
        a wanted one, including those a search found the other way round (from a searched or lost row)."""
        q_rows, t_rows = oriented(pairs, searched, wanted)
        for start in range(0, len(q_rows), CONFIRM_PAIRS):
            q, t = q_rows[start : start + CONFIRM_PAIRS], t_rows[start : start + CONFIRM_PAIRS]
            both = (vectors(q).astype(np.float64), vectors(t).astype(np.float64))
            exact = np.round(np.einsum("ij,ij->i", *both), 9)
            for a, b, sim in zip(q.tolist(), t.tolist(), exact.tolist()):
                if sim >= self.threshold:
                    found[a].append((sim, keys[b], b))

    def _lost_pairs(
        self, index: AnnIndex, rows: IntArray, searched: npt.NDArray[np.bool_], vectors: VectorsOf
    ) -> list[Pairs]:
        """Candidate pairs (searched row, lost row) that the searches of `rows` (marked in `searched`) cannot
        give: a lost row is one no search returns. Whichever costs least: every row compared with every lost row
        exactly (few rows; rows x lost is quadratic over a build), or the lost rows that were not searched now
        searching for themselves `LOST_K` wide (their hits among `rows`, the other way round: cosines are
        symmetric), or the rows searching a graph of the lost rows alone (`_lost_graph`; the rows lost there too
        search for themselves). Rows lost now are compared with every lost row exactly on either search path
        (neither of two lost rows' searches returns the other)."""
        top = len(searched)
        every = np.array(sorted(index.lost), dtype=np.int64)
        lost = every[every < top]
        if not len(lost):
            return []
        now, far, kept = lost[searched[lost]], lost[~searched[lost]], index.lost_vectors(lost, vectors)
        held = 0 if index.lost_graph is None else index.lost_graph.size
        wide = WIDE_ROW_COST * len(far)
        through_graph = ANN_ROW_COST * (len(lost) - held) + LOST_GRAPH_ROW_COST * len(rows)
        if len(rows) * len(lost) <= min(wide, through_graph) + len(now) * len(lost):
            return self._exact_pairs(rows, lost, vectors, kept)
        out = self._exact_pairs(now, lost, vectors, kept)
        if through_graph < wide:
            graph = self._lost_graph(index, every, vectors)  # all of them: a later batch's top may be higher
            out.extend(self._searched(graph, rows, ANN_FIRST_K, vectors))
            far = np.intersect1d(far, np.fromiter(graph.lost, dtype=np.int64, count=len(graph.lost)))
        for lost_rows, hits in self._searched(index, far, LOST_K, vectors):
            keep = hits < top
            keep[keep] = searched[hits[keep]]
            out.append((hits[keep], lost_rows[keep]))
        return out

    def _lost_graph(self, index: AnnIndex, lost: IntArray, vectors: VectorsOf) -> AnnIndex:
        """`index.lost_graph`, an HNSW graph of the lost rows alone, grown by those it lacks (built anew when it
        holds a row that is no longer lost: the index was relabelled). A lost row lies in a group of near copies
        that the large graph's pruning cut off; among the lost rows alone its search mostly returns it, and the
        rows whose search there does not are noted in the graph's own `lost`."""
        graph = index.lost_graph
        if graph is None or not np.isin(graph.rows(), lost).all():
            graph = index.lost_graph = AnnIndex(index.dim)
        new = np.setdiff1d(lost, graph.rows())
        _add(graph, new, vectors)
        graph.lost.update(_missed(self._searched(graph, new, ANN_FIRST_K, vectors), new).tolist())
        return graph

    def _searched(self, index: AnnIndex, rows: IntArray, k: int, vectors: VectorsOf) -> list[Pairs]:
        """(row, hit) pairs of the rows' searches, starting with `k` results each."""
        out: list[Pairs] = []
        for start in range(0, len(rows), self.block):
            block = rows[start : start + self.block]
            qi, ti = index.neighbours(vectors(block), self.threshold, k, index.size)
            out.append((block[qi], ti))
        return out

    def _exact_pairs(
        self, rows: IntArray, others: IntArray, vectors: VectorsOf, other_vectors: npt.NDArray[np.float32]
    ) -> list[Pairs]:
        """(row, other) pairs whose float32 cosine is within `SLACK` of the threshold, by exact products (the
        others' vectors given), in blocks of at most `self.block` rows and 4M products (16 MiB at once)."""
        out: list[Pairs] = []
        if not len(rows) or not len(others):
            return out
        step = max(1, min(self.block, (1 << 22) // len(others)))
        for start in range(0, len(rows), step):
            block = rows[start : start + step]
            qi, oi = np.nonzero(vectors(block) @ other_vectors.T >= self.threshold - SLACK)
            out.append((block[qi], others[oi]))
        return out

    def ann_index(self, vectors: VectorsOf, rows: int) -> AnnIndex:
        """The ANN index, holding at least phrase rows 0..rows-1 (rows are added when first needed and never
        removed: their vectors do not change, and dead rows are filtered out of the results)."""
        self._load_saved_ann()
        if self.ann is None:
            self.ann = AnnIndex(int(vectors(np.zeros(1, dtype=np.int64)).shape[1]))
            self.ann_present = np.zeros(0, dtype=bool)
        if len(self.ann_present) < rows:
            self.ann_present = np.concatenate([self.ann_present, np.zeros(rows - len(self.ann_present), bool)])
        missing = np.flatnonzero(~self.ann_present[:rows]).astype(np.int64)
        _add(self.ann, missing, vectors)
        self.ann_present[missing] = True
        return self.ann

    def _load_saved_ann(self) -> None:
        """Run the saved index's loader once, before the index is first needed (opening does not pay for it)."""
        loader, self.ann_loader = self.ann_loader, None
        if loader is not None and self.ann is None:
            loader()

    def adopt_ann(self, index: AnnIndex, present: npt.NDArray[np.bool_]) -> None:
        """Use a loaded ANN index that holds the rows marked in `present`."""
        self.ann, self.ann_present = index, present

    def _set(self, row: int, neighbours: list[Neighbour]) -> None:
        touched = self.touched
        for _, _, old in self.lists.get(row, []):
            self.incoming.discard(old, row)
            pair = (min(row, old), max(row, old))
            self._edge_arrays.mark(pair)
            if touched is not None:
                touched.add(pair)
            count, sim = self._edges[pair]
            if count == 1:
                del self._edges[pair]
            else:
                self._edges[pair] = (count - 1, sim)
        if neighbours:
            self.lists[row] = neighbours
        else:  # most phrases have no synonym, and get no entry (a dict entry and an empty list each)
            self.lists.pop(row, None)
        for sim, _, new in neighbours:
            self.incoming.add(new, row)
            pair = (min(row, new), max(row, new))
            self._edge_arrays.mark(pair)
            if touched is not None:
                touched.add(pair)
            self._edges[pair] = (self._edges.get(pair, (0, sim))[0] + 1, sim)

    def add(self, new_rows: IntArray, alive_rows: IntArray, vectors: VectorsOf, keys: Sequence[str]) -> set[int]:
        """Give the new phrases their lists and let old phrases take them in. Returns rows whose list changed."""
        new = set(new_rows.tolist())
        changed = set(new)
        for row, neighbours in self._candidates(new_rows, alive_rows, vectors, keys).items():
            self._set(row, self._order(neighbours))
            for sim, _, other in neighbours:
                if other in new:
                    continue
                current = self.lists.get(other, [])
                merged = self._order([*current, (sim, keys[row], row)])
                if merged != current:
                    self._set(other, merged)
                    changed.add(other)
        return changed

    def remove(self, dead_rows: IntArray, alive_rows: IntArray, vectors: VectorsOf, keys: Sequence[str]) -> set[int]:
        """Drop dead phrases; a phrase whose full list lost a member is recomputed (its next neighbour may now
        qualify). `alive_rows` excludes the dead. Returns rows whose list changed (the dead included)."""
        dead = set(dead_rows.tolist())
        changed = set(dead)
        recompute: set[int] = set()
        for row in dead:
            for other in self.incoming.holders(row):
                if other in dead:
                    continue
                current = self.lists[other]
                if len(current) >= self.top_k:
                    recompute.add(other)
                self._set(other, [n for n in current if n[2] != row])
                changed.add(other)
            self._set(row, [])
            self.incoming.forget(row)
        if recompute:
            rows = np.array(sorted(recompute), dtype=np.int64)
            for row, neighbours in self._candidates(rows, alive_rows, vectors, keys).items():
                self._set(row, self._order(neighbours))
        return changed

    def replace(self, lists: dict[int, list[Neighbour]]) -> None:
        """Set the given rows' lists as they are given (another process's search found them: see
        engram.index.live.refresh); the other rows keep theirs."""
        for row, neighbours in lists.items():
            self._set(row, self._order(neighbours))

    def load(self, lists: dict[int, list[Neighbour]]) -> None:
        self.lists, self.incoming, self._edges = ListTable(), IncomingTable(), EdgeTable()
        self._edge_arrays.reset()
        for row, neighbours in lists.items():
            self._set(row, self._order(neighbours))

    def saved(self) -> dict[str, npt.NDArray[Any]]:
        """The lists as arrays (rows that have a list, offsets, neighbour rows, cosines), for `restore`."""
        return self.lists.arrays()

    def restore(self, arrays: dict[str, npt.NDArray[Any]], keys: Sequence[str]) -> None:
        """Take back what `saved` gave (lists already in order). The tables read the arrays until a change sets
        a list (`engram.graph.synonym_tables`): a memory that is only read, or changes a few lists, builds no
        dict of every list."""
        saved = SavedLists(arrays, keys)
        self.lists, self.incoming, self._edges = ListTable(saved), IncomingTable(saved), EdgeTable(saved)
        self._edge_arrays.seed(self._edges.saved_arrays)

    def list_of(self, row: int) -> list[Neighbour]:
        """The synonym list of phrase `row` (empty when it has none)."""
        found: list[Neighbour] = self.lists.get(row, [])
        return found

    def weight(self, pair: tuple[int, int]) -> float | None:
        """The cosine of synonym edge `pair` (i < j), or None when there is no such edge."""
        found = self._edges.get(pair)
        return None if found is None else float(found[1])

    def edge_count(self) -> int:
        return len(self._edges)

    def edges(self) -> tuple[IntArray, npt.NDArray[np.float64]]:
        """Undirected edges (i < j) with their cosines, sorted; read-only arrays (the edge table's, patched by the
        pairs changed since the last call: O(edges) copies, not a sort of every edge)."""
        return self._edge_arrays.arrays(self._edges)


def _add(index: AnnIndex, rows: IntArray, vectors: VectorsOf) -> None:
    """Add `rows` to `index`, their vectors read 65,536 rows at a time."""
    for start in range(0, len(rows), 65536):
        part = rows[start : start + 65536]
        index.add(part, vectors(part))


def _missed(pairs: Sequence[Pairs], rows: IntArray) -> IntArray:
    """The rows (in their order) that their own search did not return among `pairs` (searched row, hit)."""
    returned = np.concatenate([np.zeros(0, dtype=np.int64), *(q[q == t] for q, t in pairs)])
    out: IntArray = rows[~np.isin(rows, returned)]
    return out
