"""HippoRAG 1 retrieval: query named entities, each linked to its nearest phrase node, weighted by node
specificity (1 / number of passages containing the phrase); Personalized PageRank over the phrase graph
(relation and synonym edges, no passage nodes); passages scored by the summed probability of their phrases.

Passages the walk gives equal mass (typically 0, outside the seeds' component) are ordered by their dense
score, so the ranking is complete and deterministic. A query with no entity, or a memory without phrases,
gets the dense ranking (`method == "dense"`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.config import RetrieveConfig
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.phrase_graph import (
    context_matrix,
    link_nearest,
    phrase_graph_passage_scores,
    phrase_operator,
    rank_with_tiebreak,
    specificity_seeds,
)
from engram.retrieve.ranking import GraphRanking
from engram.retrieve.scoring import top_k
from engram.types import Fact

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
# per query: (seed phrase rows, seed weights), or None for "no seed: rank densely"
SeedList = Sequence["tuple[IntArray, FloatArray] | None"]


def dense_scores(index: GraphIndex, query_vectors: npt.ArrayLike) -> FloatArray:
    """Query-passage cosines (dead passages at the lowest alive score)."""
    return index.dense_scores(query_vectors)


def dense_fallback(index: GraphIndex, passage_scores: FloatArray, k: int) -> tuple[IntArray, FloatArray]:
    rows = top_k(index.rankable(passage_scores), k, index.passage_rank)
    return rows, passage_scores[rows]


def phrase_graph_rank(
    index: GraphIndex,
    seeds: SeedList,
    passage_scores: FloatArray,
    damping: float,
    k: int,
    method: str,
    facts: Sequence[tuple[list[Fact], list[Fact], bool]] | None = None,
) -> list[GraphRanking]:
    """Rank passages from phrase seeds by PPR over the phrase graph (one batched run for all queries).
    `facts` optionally carries (candidates, kept, filtered) per query for the explanation."""
    n = index.n_phrases
    alive = index.node_rows[index.node_rows < n]  # alive phrase rows in canonical order
    columns = [qi for qi, s in enumerate(seeds) if s is not None and len(s[0])]
    graph_scores: FloatArray = np.zeros((len(index.passages), 0))
    if columns and len(alive):
        resets = np.zeros((n, len(columns)))
        for col, qi in enumerate(columns):
            seed = seeds[qi]
            if seed is not None:
                resets[seed[0], col] = seed[1]
        operator, context = index.memo("phrase_graph", lambda: _phrase_graph(index, alive))  # once per view
        graph_scores = phrase_graph_passage_scores(operator, context, resets[alive], damping)
    out: list[GraphRanking] = []
    for qi, seed in enumerate(seeds):
        candidates, kept, filtered = facts[qi] if facts is not None else ([], [], False)
        if seed is None or qi not in columns or not len(alive):
            rows, scores = dense_fallback(index, passage_scores[qi], k)
            out.append(GraphRanking(rows, scores, "dense", candidates, kept, [], filtered))
            continue
        mass = index.rankable(graph_scores[:, columns.index(qi)])
        ranked = rank_with_tiebreak(mass, passage_scores[qi], k, index.passage_rank)
        named = [(index.tables.phrases[r], float(w)) for r, w in zip(seed[0].tolist(), seed[1].tolist())]
        named.sort(key=lambda item: -item[1])
        out.append(GraphRanking(ranked, mass[ranked], method, candidates, kept, named, filtered))
    return out


def _phrase_graph(index: GraphIndex, alive: IntArray) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """The view's phrase-graph walk over its `alive` phrase rows and the passages' context matrix over them."""
    operator = phrase_operator(index.adjacency, alive)
    return operator, context_matrix(index.tables.context, len(index.passages), index.n_phrases)[:, alive]


def entity_seeds(
    index: GraphIndex, entity_vectors: Sequence[npt.ArrayLike], config: RetrieveConfig, use_link_score: bool
) -> list[tuple[IntArray, FloatArray] | None]:
    """Link each query's entities to their nearest phrase nodes and weight them by node specificity (when
    `config.node_specificity`), times the link cosine when `use_link_score`."""
    counts = index.phrase_passage_counts if config.node_specificity else np.ones(index.n_phrases)
    out: list[tuple[IntArray, FloatArray] | None] = []
    for vectors in entity_vectors:
        rows, sims = link_nearest(vectors, index.phrase_vectors, index.phrase_alive, index.phrase_rank)
        if len(rows) == 0 or index.n_phrases == 0:
            out.append(None)
            continue
        out.append(specificity_seeds(rows, counts, sims if use_link_score else None))
    return out


def hipporag1(
    index: GraphIndex,
    query_vectors: npt.ArrayLike,
    entity_vectors: Sequence[npt.ArrayLike],
    config: RetrieveConfig,
    k: int,
) -> list[GraphRanking]:
    """Rank passages for each query from its entities' vectors (one (entities x dim) array per query, maybe
    empty). `config.damping` and `config.node_specificity` apply."""
    seeds = entity_seeds(index, entity_vectors, config, use_link_score=False)
    return phrase_graph_rank(index, seeds, dense_scores(index, query_vectors), config.damping, k, "hipporag1")
