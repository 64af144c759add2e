"""The HippoRAG 2 paper's ablations (its table 4), as pure functions over a `GraphIndex`:

* `ner_to_node`: query named entities linked to their nearest phrase nodes (no fact linking, no filter),
  then HippoRAG 2's graph search (passage nodes seeded by dense scores).
* `query_to_node`: the query embedding linked directly to its `max_seeds` nearest phrase nodes (no filter).
* `no_passage_nodes`: HippoRAG 2's fact linking and filter, then PPR over the phrase graph only, with
  passages scored from their phrases' probabilities (as HippoRAG 1 does).
* without the filter: `hipporag2` with no recognition function (see `retrieve.variants`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from engram.config import RetrieveConfig
from engram.index.view import GraphIndex
from engram.retrieve.hipporag1 import SeedList, dense_fallback, dense_scores, entity_seeds, phrase_graph_rank
from engram.retrieve.hipporag2 import FilterFn, GraphRanking
from engram.retrieve.scoring import min_max, phrase_seeds, reset_vector, top_k
from engram.types import Fact

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def full_graph_rank(
    index: GraphIndex, seeds: SeedList, passage_scores: FloatArray, config: RetrieveConfig, k: int, method: str
) -> list[GraphRanking]:
    """HippoRAG 2's graph search from given phrase seeds: phrase seeds plus every passage seeded with
    `passage_weight` x its normalised dense score, one batched PPR over the full graph."""
    columns = [qi for qi, s in enumerate(seeds) if s is not None and len(s[0])]
    ranks: FloatArray = np.zeros((0, 0))
    if columns:
        resets = []
        for qi in columns:
            seed = seeds[qi]
            if seed is not None:
                rows, weights = seed
                resets.append(reset_vector(index.n_phrases, rows, weights, passage_scores[qi], config.passage_weight))
        ranks = index.ppr(np.stack(resets, axis=1), config.damping)
    out: list[GraphRanking] = []
    for qi, seed in enumerate(seeds):
        if qi not in columns or seed is None:
            rows, scores = dense_fallback(index, passage_scores[qi], k)
            out.append(GraphRanking(rows, scores, "dense", [], [], [], False))
            continue
        mass = index.rankable(ranks[index.n_phrases :, columns.index(qi)])
        ranked = top_k(mass, k, index.passage_rank)
        order = np.argsort(-seed[1], kind="stable")
        named = [(index.tables.phrases[int(seed[0][i])], float(seed[1][i])) for i in order.tolist()]
        out.append(GraphRanking(ranked, mass[ranked], method, [], [], named, False))
    return out


def ner_to_node(
    index: GraphIndex,
    query_vectors: npt.ArrayLike,
    entity_vectors: Sequence[npt.ArrayLike],
    config: RetrieveConfig,
    k: int,
) -> list[GraphRanking]:
    """Entities linked to their nearest phrases, each seeded with its link cosine (divided by the phrase's
    passage count under node specificity), then HippoRAG 2's graph search."""
    seeds = entity_seeds(index, entity_vectors, config, use_link_score=True)
    return full_graph_rank(index, seeds, dense_scores(index, query_vectors), config, k, "hipporag2-ner-to-node")


def query_to_node(
    index: GraphIndex, query_vectors: npt.ArrayLike, config: RetrieveConfig, k: int
) -> list[GraphRanking]:
    """The `max_seeds` phrases nearest to the query embedding, each seeded with its min-max normalised
    cosine (divided by its passage count under node specificity), then HippoRAG 2's graph search."""
    vectors = np.asarray(query_vectors, dtype=np.float32)
    seeds: list[tuple[IntArray, FloatArray] | None] = []
    counts = index.phrase_passage_counts if config.node_specificity else np.ones(index.n_phrases)
    if index.n_phrases:
        similarity = index.phrase_scores(vectors)
        for row in similarity:
            best = top_k(np.where(index.phrase_alive, row, -np.inf), config.max_seeds, index.phrase_rank)
            weights = min_max(row)[best] / np.maximum(counts[best], 1.0)
            keep = weights > 0
            seeds.append((best[keep], weights[keep]) if keep.any() else None)
    else:
        seeds = [None] * len(vectors)
    return full_graph_rank(index, seeds, dense_scores(index, vectors), config, k, "hipporag2-query-to-node")


def _facts(index: GraphIndex, rows: Sequence[int], scores: FloatArray) -> list[Fact]:
    return [Fact(*index.tables.facts[i], score=float(scores[i])) for i in rows]


def no_passage_nodes(
    index: GraphIndex,
    query_vectors: npt.ArrayLike,
    queries: Sequence[str],
    config: RetrieveConfig,
    k: int,
    recognition: FilterFn | None = None,
) -> list[GraphRanking]:
    """HippoRAG 2's query-to-fact linking and recognition filter, then PPR over the phrase graph alone."""
    vectors = np.asarray(query_vectors, dtype=np.float32)
    fact_scores = index.fact_scores(vectors) if bool(index.fact_alive.any()) else None
    counts = index.phrase_passage_counts if config.node_specificity else None
    seeds: list[tuple[IntArray, FloatArray] | None] = []
    explained: list[tuple[list[Fact], list[Fact], bool]] = []
    for qi, query in enumerate(queries):
        if fact_scores is None:
            seeds.append(None)
            explained.append(([], [], False))
            continue
        top = top_k(np.where(index.fact_alive, fact_scores[qi], -np.inf), config.fact_top_k, index.fact_rank).tolist()
        kept, filtered = top, False
        if recognition is not None and config.use_filter and top:
            choice = recognition(query, [index.tables.facts[i] for i in top])
            if choice is not None:
                kept, filtered = [top[i] for i in choice], True
        explained.append((_facts(index, top, fact_scores[qi]), _facts(index, kept, fact_scores[qi]), filtered))
        if not kept:
            seeds.append(None)
            continue
        normalised = min_max(fact_scores[qi])
        rows = np.array(kept, dtype=np.int64)
        seeds.append(
            phrase_seeds(rows, normalised, index.tables.fact_phrases, config.max_seeds, counts, index.phrase_rank)
        )
    passage_scores = dense_scores(index, vectors)
    return phrase_graph_rank(
        index, seeds, passage_scores, config.damping, k, "hipporag2-no-passage-nodes", explained
    )
