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
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.hipporag1 import SeedList, dense_scores, entity_seeds, phrase_graph_rank
from engram.retrieve.ranking import Evidence, FilterFn, GraphRanking, kept_facts_all, rank_full_graph
from engram.retrieve.scoring import min_max, phrase_seeds, reset_vector, top_k

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def full_graph_rank(
    index: GraphIndex, seeds: SeedList, passage_scores: FloatArray, config: RetrieveConfig, k: int, method: str
) -> list[GraphRanking]:
    """HippoRAG 2's graph search from given phrase seeds: phrase seeds plus every passage seeded with
    `passage_weight` x its normalised dense score, PPR over the full graph (each query's own solve)."""
    resets: list[FloatArray | None] = []
    named: list[list[tuple[str, float]]] = []
    for qi, seed in enumerate(seeds):
        if seed is None or not len(seed[0]):
            resets.append(None)
            named.append([])
            continue
        rows, weights = seed
        resets.append(reset_vector(index.n_phrases, rows, weights, passage_scores[qi], config.passage_weight))
        order = np.argsort(-weights, kind="stable")
        named.append([(index.tables.phrases[int(rows[i])], float(weights[i])) for i in order.tolist()])
    evidence: list[Evidence] = [([], [], False) for _ in seeds]
    return rank_full_graph(index, resets, passage_scores, named, evidence, config.damping, k, method)


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
    passage_scores = dense_scores(index, vectors)
    method = "hipporag2-no-passage-nodes"
    if not bool(index.fact_alive.any()):
        return phrase_graph_rank(index, [None] * len(queries), passage_scores, config.damping, k, method)
    fact_scores = index.fact_scores(vectors, config.fact_top_k)
    counts = index.phrase_passage_counts if config.node_specificity else None
    picked = kept_facts_all(index, queries, fact_scores, config, recognition)
    seeds: list[tuple[IntArray, FloatArray] | None] = []
    for qi, (_, _, kept_rows, _) in enumerate(picked):
        rows = np.array(kept_rows, dtype=np.int64)
        seeds.append(
            phrase_seeds(rows, min_max(fact_scores[qi]), index.tables.fact_phrases, config.max_seeds, counts,
                         index.phrase_rank)
            if kept_rows
            else None
        )  # fmt: skip
    explained = [(candidates, kept, filtered) for candidates, kept, _, filtered in picked]
    return phrase_graph_rank(index, seeds, passage_scores, config.damping, k, method, explained)
