"""A small neighbourhood of the graph around some nodes, for pictures (the server's graph route, the web page).

Pure functions over plain arrays, in the node order of `engram.graph.build`: phrase nodes 0..P-1, then passage
nodes P..P+N-1. Edges come as typed tables (relation and synonym pairs between phrases, context pairs of
(passage row, phrase)), so every edge keeps its kind; a relation and a synonym edge on the same pair stay two
edges here (the adjacency matrix adds their weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class GraphNode:
    """`id` is "phrase:<phrase>" or "passage:<passage id>"; `label` the phrase or the passage's title or id."""

    id: str
    kind: str  # "phrase" | "passage"
    label: str
    start: bool  # one of the nodes the neighbourhood was asked around


@dataclass(frozen=True)
class GraphEdge:
    source: str
    target: str
    kind: str  # "relation" | "synonym" | "context"
    weight: float


@dataclass(frozen=True)
class Neighbourhood:
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    truncated: bool  # the node limit cut the neighbourhood short


@dataclass(frozen=True)
class EdgeTables:
    """Typed undirected edges in node numbering (phrases first, then passages)."""

    kinds: tuple[str, ...]
    pairs: tuple[IntArray, ...]  # each (E, 2)
    weights: tuple[FloatArray, ...]  # each (E,)

    @staticmethod
    def from_graph(
        n_phrases: int,
        relation: IntArray,
        relation_weight: FloatArray,
        synonyms: tuple[IntArray, FloatArray],
        context: IntArray,
        context_weight: float = 1.0,
    ) -> EdgeTables:
        """From the tables of `engram.graph.build`: context rows are (passage row, phrase)."""
        ctx = np.column_stack([context[:, 1], context[:, 0] + n_phrases]) if len(context) else np.zeros((0, 2))
        return EdgeTables(
            kinds=("relation", "synonym", "context"),
            pairs=(relation.reshape(-1, 2), synonyms[0].reshape(-1, 2), ctx.astype(np.int64).reshape(-1, 2)),
            weights=(
                relation_weight.astype(np.float64),
                synonyms[1].astype(np.float64),
                np.full(len(ctx), context_weight, dtype=np.float64),
            ),
        )


def expand(
    tables: EdgeTables, n_nodes: int, alive: BoolArray, starts: Sequence[int], hops: int, limit: int
) -> tuple[IntArray, bool]:
    """Nodes within `hops` edges of `starts` (alive nodes only), breadth first, at most `limit` of them, starts
    included (they come first). Within a hop, nodes that join two or more of the hop's frontier come first (the
    paths between the seeds and what they reached), then every frontier node's neighbours in turn, heaviest
    edge first, so that a cut-short picture still connects each start. Also says whether the limit left out
    some node within reach."""
    wanted = list(dict.fromkeys(int(s) for s in starts if alive[s]))
    chosen, truncated = wanted[:limit], len(wanted) > limit
    seen = np.zeros(n_nodes, dtype=bool)
    seen[chosen] = True
    frontier = np.array(chosen, dtype=np.int64)
    for _ in range(hops):
        if not len(frontier):
            break
        fresh = _fresh_neighbours(tables, frontier, n_nodes, alive & ~seen)
        room = limit - len(chosen)
        truncated = truncated or len(fresh) > room
        fresh = fresh[:room]
        seen[fresh] = True
        chosen.extend(fresh)
        frontier = np.array(fresh, dtype=np.int64)
    return np.array(chosen, dtype=np.int64), truncated


def _fresh_neighbours(tables: EdgeTables, frontier: IntArray, n_nodes: int, open_: BoolArray) -> list[int]:
    """The `open_` neighbours of `frontier` in picking order: those adjacent to several frontier nodes first
    (most such, then heaviest edge), then round robin over the frontier in its order, each node's neighbours
    heaviest edge first (ties by node number)."""
    position = np.full(n_nodes, -1, dtype=np.int64)
    position[frontier] = np.arange(len(frontier))
    src_parts, dst_parts, weight_parts = [], [], []
    for pairs, weights in zip(tables.pairs, tables.weights):
        for a, b in ((0, 1), (1, 0)):
            hit = (position[pairs[:, a]] >= 0) & open_[pairs[:, b]]
            src_parts.append(position[pairs[hit, a]])
            dst_parts.append(pairs[hit, b])
            weight_parts.append(np.maximum(weights[hit], 1e-12))
    src, dst, weight = np.concatenate(src_parts), np.concatenate(dst_parts), np.concatenate(weight_parts)
    if not len(dst):
        return []
    order = np.lexsort((dst, -weight, src))  # per frontier node: heaviest edge first, then node number
    src, dst, weight = src[order], dst[order], weight[order]
    _, first = np.unique(src * n_nodes + dst, return_index=True)  # one row per (frontier node, neighbour) ...
    first.sort()  # ... its heaviest edge, in the order above
    src, dst, weight = src[first], dst[first], weight[first]
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
    rank = np.arange(len(src)) - np.repeat(starts, np.diff(np.r_[starts, len(src)]))
    reach = np.bincount(dst, minlength=n_nodes)
    best = np.zeros(n_nodes, dtype=np.float64)
    np.maximum.at(best, dst, weight)
    bridges = np.unique(dst[reach[dst] >= 2])
    bridges = bridges[np.lexsort((bridges, -best[bridges], -reach[bridges]))]
    turns = dst[np.lexsort((src, rank))]
    _, once = np.unique(turns, return_index=True)
    turns = turns[np.sort(once)]
    return [int(i) for i in bridges] + [int(i) for i in turns[reach[turns] < 2]]


def induced_edges(tables: EdgeTables, nodes: IntArray, n_nodes: int) -> list[tuple[int, int, str, float]]:
    """Every edge with both ends in `nodes`: (node, node, kind, weight), by kind then pair."""
    member = np.zeros(n_nodes, dtype=bool)
    member[nodes] = True
    out: list[tuple[int, int, str, float]] = []
    for kind, pairs, weights in zip(tables.kinds, tables.pairs, tables.weights):
        keep = np.flatnonzero(member[pairs[:, 0]] & member[pairs[:, 1]])
        out.extend((int(pairs[i, 0]), int(pairs[i, 1]), kind, float(weights[i])) for i in keep)
    return out


def neighbourhood(
    tables: EdgeTables,
    phrases: Sequence[str],
    passages: Sequence[tuple[str, str]],
    alive: BoolArray,
    starts: Sequence[int],
    hops: int,
    limit: int,
) -> Neighbourhood:
    """The picture around `starts` (node numbers). `passages` are (id, label) per passage row; `alive` masks
    every node (phrases then passages)."""
    n_nodes = len(phrases) + len(passages)
    nodes, truncated = expand(tables, n_nodes, alive, starts, hops, limit)
    names = {int(i): _node(int(i), phrases, passages) for i in nodes}
    start_set = {int(s) for s in starts}
    graph_nodes = [GraphNode(names[i][0], names[i][1], names[i][2], i in start_set) for i in nodes.tolist()]
    edges = [GraphEdge(names[a][0], names[b][0], kind, w) for a, b, kind, w in induced_edges(tables, nodes, n_nodes)]
    return Neighbourhood(graph_nodes, edges, truncated)


def _node(i: int, phrases: Sequence[str], passages: Sequence[tuple[str, str]]) -> tuple[str, str, str]:
    if i < len(phrases):
        return f"phrase:{phrases[i]}", "phrase", phrases[i]
    pid, label = passages[i - len(phrases)]
    return f"passage:{pid}", "passage", label
