"""`Memory.neighbourhood`: names (passage ids or phrases) to nodes of a read view, then the pure picture
function of `engram.graph.neighbourhood`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engram.graph.neighbourhood import EdgeTables, Neighbourhood, neighbourhood
from engram.index.view.graph_index import GraphIndex
from engram.text import normalize_phrase


def edge_tables(view: GraphIndex, context_weight: float) -> EdgeTables:
    """The view's edges by kind (relation, synonym, context), as the adjacency weighs them."""
    return EdgeTables.from_graph(
        view.n_phrases,
        view.tables.relation,
        view.tables.relation_support,
        view.synonyms,
        view.tables.context,
        context_weight,
    )


def start_nodes(view: GraphIndex, names: Sequence[str]) -> list[int]:
    """Node numbers for `names`: an alive passage with that id, else the phrase the name normalises to.
    Names matching neither are left out."""
    n_phrases = view.n_phrases
    passages = {p.id: n_phrases + i for i, p in enumerate(view.passages) if view.passage_alive[i]}
    phrases = {k: i for i, k in enumerate(view.tables.phrases) if view.phrase_alive[i]}
    out = []
    for name in names:
        node = passages.get(name)
        if node is None:
            node = phrases.get(normalize_phrase(name))
        if node is not None:
            out.append(node)
    return out


def around(view: GraphIndex, names: Sequence[str], hops: int, limit: int, context_weight: float) -> Neighbourhood:
    """Nodes within `hops` edges of `names` (at most `limit`) and the typed edges among them."""
    tables = edge_tables(view, context_weight)
    alive = np.concatenate([view.phrase_alive, view.passage_alive]).astype(bool)
    passages = [(p.id, p.title or p.id) for p in view.passages]
    return neighbourhood(tables, view.tables.phrases, passages, alive, start_nodes(view, names), hops, limit)
