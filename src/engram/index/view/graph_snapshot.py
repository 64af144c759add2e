"""`Memory.graph`: a read view's graph copied out by names (`engram.types.GraphSnapshot`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import cast

import numpy as np

from engram.index.view.graph_index import GraphIndex
from engram.index.view.neighbourhood import edge_tables
from engram.types import GraphSnapshot, NodePair, Triple

DECIMALS = 9  # as `GraphIndex.canonical`: equal graphs built in another order compare equal


def graph_snapshot(view: GraphIndex, context_weight: float) -> GraphSnapshot:
    """The graph of `view` as a frozen `GraphSnapshot` (plain tuples and read-only mappings, nothing shared with
    the view).

    Parameters
    ----------
    view
        A committed generation's read view.
    context_weight
        The weight of passage-phrase edges, as the view's adjacency uses it.

    Returns
    -------
    GraphSnapshot
        Its alive nodes, typed edges among them, summed edge weights and counts.
    """
    canonical = view.canonical()
    names = [f"p:{k}" for k in view.tables.phrases] + [f"d:{p.id}" for p in view.passages]
    alive = np.concatenate([view.phrase_alive, view.passage_alive]).astype(bool)
    tables = edge_tables(view, context_weight)
    typed: dict[str, Mapping[NodePair, float]] = {}
    for kind, pairs, weights in zip(tables.kinds, tables.pairs, tables.weights):
        found: dict[NodePair, float] = {}
        for (i, j), weight in zip(pairs.tolist(), weights.tolist()):
            if alive[i] and alive[j]:
                a, b = sorted((names[i], names[j]))
                found[(a, b)] = round(found.get((a, b), 0.0) + float(weight), DECIMALS)
        typed[kind] = MappingProxyType(dict(sorted(found.items())))
    edges = cast(dict[NodePair, float], canonical["edges"])
    return GraphSnapshot(
        passages=tuple(cast(list[str], canonical["passages"])),
        phrases=tuple(cast(list[str], canonical["phrases"])),
        facts=tuple(cast(list[Triple], canonical["facts"])),
        relation_edges=typed["relation"],
        synonym_edges=typed["synonym"],
        context_edges=typed["context"],
        edges=MappingProxyType(dict(sorted(edges.items()))),
        counts=MappingProxyType(view.stats()),
    )
