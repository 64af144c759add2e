"""HippoRAG 2 retrieval as the paper describes it (`method="hipporag2-paper"`): query-to-fact scoring,
recognition filter, seed weighting, Personalized PageRank. engram's default (`hipporag2`) is in
`engram.retrieve.default`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from engram.config import RetrieveConfig
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.ranking import FilterFn, GraphRanking, kept_facts_all, rank_full_graph
from engram.retrieve.scoring import min_max, phrase_seeds, reset_vector

PAPER = "hipporag2-paper"


def hipporag2(
    index: GraphIndex,
    query_vectors: npt.NDArray[np.float32],
    queries: Sequence[str],
    config: RetrieveConfig,
    k: int,
    recognition: FilterFn | None = None,
    method: str = PAPER,
) -> list[GraphRanking]:
    """The paper's method (`hipporag2-paper`). Queries whose filter keeps no fact fall back to dense
    ranking; the others run Personalized PageRank, each query its own solve."""
    passage_scores = index.dense_scores(query_vectors)
    fact_scores = index.fact_scores(query_vectors, config.fact_top_k)
    picked = kept_facts_all(index, queries, fact_scores, config, recognition)
    counts = index.phrase_passage_counts if config.node_specificity else None
    resets: list[npt.NDArray[np.float64] | None] = []
    seeds: list[list[tuple[str, float]]] = []
    for qi, (_, _, kept_rows, _) in enumerate(picked):
        if not kept_rows:
            resets.append(None)
            seeds.append([])
            continue
        seed_rows, seed_weights = phrase_seeds(
            np.array(kept_rows, dtype=np.int64),
            min_max(fact_scores[qi]),
            index.tables.fact_phrases,
            config.max_seeds,
            counts,
            index.phrase_rank,
        )
        resets.append(reset_vector(index.n_phrases, seed_rows, seed_weights, passage_scores[qi], config.passage_weight))
        seeds.append([(index.tables.phrases[r], float(w)) for r, w in zip(seed_rows.tolist(), seed_weights)])
    evidence = [(c, kept if rows else [], f) for c, kept, rows, f in picked]
    return rank_full_graph(index, resets, passage_scores, seeds, evidence, config.damping, k, method)
