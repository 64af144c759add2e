"""RAPTOR's collapsed-tree retrieval over a memory: every node of the tree (the alive passages as leaves and
the stored summaries) is ranked by the cosine of its vector with the query's; RAPTOR's context is the nodes
taken in that order until the next one would pass the token budget. Results are passages, so recall@k is
computable: walking the ranked nodes, a leaf gives its passage and a summary gives the passages it covers
(best cosine with the query first), each passage once; the list goes on past the budget in the same order until
it holds k passages. Each passage's `metadata["raptor"]` says which node brought it (its id and layer, the
summary's text for a summary) and whether that node is inside the budget's context."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.index.view.graph_index import GraphIndex
from engram.retrieve.context import RetrievalContext
from engram.retrieve.peers.base import passages_of
from engram.retrieve.peers.lightrag.prompts import passage_block
from engram.retrieve.peers.raptor.tree import state
from engram.store.peer_tables import PeerTables
from engram.tokens import default_counter
from engram.types import Retrieval, RetrievedPassage

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Summaries:
    """The stored summary nodes: ids, layers, texts, covered leaves (content hashes), tokens, unit vectors."""

    ids: list[str]
    layers: list[int]
    texts: list[str]
    leaves: list[list[str]]
    tokens: list[int]
    vectors: npt.NDArray[np.float32]


@dataclass(frozen=True)
class Leaves:
    """The view's alive passage contents in content-hash order: the first alive row of each, its tokens, and
    every alive row of each content."""

    hashes: list[str]
    first: npt.NDArray[np.int64]
    tokens: list[int]
    rows: dict[str, list[int]]


def fill_budget(tokens: Sequence[int], budget: int) -> int:
    """How many of the nodes, taken in order with these token counts, make the context: RAPTOR's collapsed
    tree stops at the first node that would pass `budget`."""
    used = 0
    for i, t in enumerate(tokens):
        if used + t > budget:
            return i
        used += t
    return len(tokens)


def expand(
    order: Sequence[int], covers: Sequence[Sequence[int]], leaf_score: FloatArray, k: int
) -> list[tuple[int, int]]:
    """(leaf, node) pairs, at most `k`: walking the nodes in `order`, each gives the leaves it covers (a leaf
    covers itself) that no earlier node gave, best `leaf_score` first (ties by leaf index)."""
    out: list[tuple[int, int]] = []
    taken: set[int] = set()
    for node in order:
        for leaf in sorted(covers[node], key=lambda i: (-leaf_score[i], i)):
            if leaf not in taken:
                taken.add(leaf)
                out.append((leaf, node))
                if len(out) >= k:
                    return out
    return out


def leaves_of(view: GraphIndex) -> Leaves:
    def build() -> Leaves:
        rows = passages_of(view)
        hashes = sorted(rows)
        counter = default_counter()
        tokens = [
            counter(passage_block(view.passages[rows[h][0]].title, view.passages[rows[h][0]].text)) for h in hashes
        ]
        return Leaves(hashes, np.asarray([rows[h][0] for h in hashes], dtype=np.int64), tokens, rows)

    return view.memo("raptor_leaves", build)


def summaries(tables: PeerTables, dim: int) -> Summaries:
    """The stored summaries, kept on `tables` until the next build writes others."""
    generation = state(tables).get("generation", "")
    held = tables.derived.get("raptor")
    if held is not None and held[0] == generation:
        found: Summaries = held[1]
        return found
    rows = tables.read("SELECT id, layer, text, leaves, vector FROM raptor_nodes ORDER BY id")
    counter = default_counter()
    vectors = np.zeros((0, dim), dtype=np.float32)
    if rows:
        vectors = np.frombuffer(b"".join(bytes(r[4]) for r in rows), dtype=np.float32).reshape(len(rows), -1)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.asarray(vectors / np.where(norms == 0, 1.0, norms), dtype=np.float32)
    loaded = Summaries(
        [str(r[0]) for r in rows], [int(r[1]) for r in rows], [str(r[2]) for r in rows],
        [list(json.loads(r[3])) for r in rows], [counter(str(r[2])) for r in rows], vectors,
    )  # fmt: skip
    tables.derived["raptor"] = (generation, loaded)
    return loaded


def retrieve(ctx: RetrievalContext, tables: PeerTables, queries: list[str], k: int, budget: int) -> list[Retrieval]:
    leaves, tree = leaves_of(ctx.view), summaries(tables, ctx.dim)
    where = {h: i for i, h in enumerate(leaves.hashes)}
    n = len(leaves.hashes)
    covers = [[i] for i in range(n)] + [[where[h] for h in hs if h in where] for hs in tree.leaves]
    tokens = np.asarray([*leaves.tokens, *tree.tokens], dtype=np.int64)
    query_vectors = np.asarray(ctx.embed_queries(queries), dtype=np.float32)
    dense = ctx.view.dense_scores(query_vectors)
    out = []
    for qi, query in enumerate(queries):
        leaf_score = dense[qi, leaves.first] if n else np.zeros(0)
        scores = np.concatenate([leaf_score, (tree.vectors @ query_vectors[qi]).astype(np.float64)])
        order = np.argsort(-scores, kind="stable")
        in_context = fill_budget(tokens[order].tolist(), budget)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        passages: list[RetrievedPassage] = []
        for leaf, node in expand(order.tolist(), covers, leaf_score, k):
            note = _note(node, n, tree, bool(rank[node] < in_context), float(leaf_score[leaf]))
            for row in leaves.rows[leaves.hashes[leaf]]:
                p = ctx.view.passages[row]
                metadata = {**p.metadata, "raptor": note}
                passages.append(RetrievedPassage(p.id, p.doc_id, p.title, p.text, float(scores[node]), metadata))
        out.append(Retrieval(query, passages[:k], "raptor"))
    return out


def _note(node: int, n_leaves: int, tree: Summaries, in_context: bool, leaf_score: float) -> dict[str, Any]:
    """What `metadata["raptor"]` says about the node that brought a passage."""
    if node < n_leaves:
        return {"layer": 0, "in_context": in_context, "leaf_score": leaf_score}
    s = node - n_leaves
    return {"layer": tree.layers[s], "node": tree.ids[s], "summary": tree.texts[s], "in_context": in_context,
            "leaf_score": leaf_score}  # fmt: skip
