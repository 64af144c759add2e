"""engram's default graph retrieval (`method="hipporag2"`): HippoRAG 2's Personalized PageRank over phrase and
passage nodes, seeded by the query's kept facts and the phrases it names as names, with a sharp passage prior
over hybrid (cosine + BM25) scores and the first stage's best passage kept first. A query the graph cannot seed
(every query of a memory without facts) is ranked by its passage scores alone, fused by significance. Each
difference from the paper's method (`hipporag2-paper`, unchanged) and why: docs/method.md, "engram's default".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from engram.config import RetrieveConfig
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.links import inner_seeds, link_seeds
from engram.retrieve.method_names import HYBRID
from engram.retrieve.named import named_only
from engram.retrieve.ranking import (
    DENSE_FALLBACK,
    FALLBACKS,
    Evidence,
    FilterFn,
    GraphRanking,
    SeedReset,
    kept_facts_all,
    rank_full_graph,
)
from engram.retrieve.scoring import (
    gap_weights,
    hybrid_scores,
    min_max,
    phrase_seeds,
    significance_scores,
    top_k,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
METHOD = "hipporag2"


def passage_prior(scores: npt.ArrayLike, weight: float, temperature: float) -> FloatArray:
    """`weight` x exp((score - best) / temperature): 1 x weight for the best passage, falling off with the
    cosine gap. Scores of -inf (dead rows) get 0."""
    return weight * gap_weights(scores, temperature)


def fact_weights(scores: FloatArray, rows: IntArray, temperature: float | None) -> FloatArray:
    """The scores of the facts at `rows` as the phrase seeds weigh them, one per row: exp((score - best) /
    temperature), the best being the highest of every fact, like the passage prior; with no temperature, the
    paper's min-max over every fact."""
    if temperature is None:
        return min_max(scores)[rows]
    if not len(scores) or not len(rows):
        return np.zeros(len(rows), dtype=np.float64)
    return gap_weights(scores[rows], temperature, best=float(scores.max()))


def combined_seeds(
    index: GraphIndex,
    links: tuple[IntArray, FloatArray],
    kept: Sequence[int],
    fact_scores: FloatArray,
    config: RetrieveConfig,
) -> tuple[IntArray, FloatArray]:
    """Linked phrases plus `fact_seed_weight` x the paper's fact seeds, plus `inner_name_weight` x the phrases
    named inside the fact seeds' names (`links.inner_seeds`); a phrase seeded several ways adds up (in that
    order). Returned sorted by weight, best first (ties by canonical phrase order)."""
    parts: list[tuple[IntArray, FloatArray]] = []
    if config.query_links and len(links[0]):
        parts.append(links)
    if kept and config.fact_seed_weight > 0:
        counts = index.phrase_passage_counts if config.node_specificity else None
        rows = np.array(kept, dtype=np.int64)
        by_facts, seed_weights = phrase_seeds(  # the kept facts by position: their weights are read at their rows
            np.arange(len(rows)),
            fact_weights(fact_scores, rows, config.fact_temperature),
            index.tables.fact_phrases[rows],
            config.max_seeds,
            counts,
            index.phrase_rank,
        )
        parts.append((by_facts, config.fact_seed_weight * seed_weights))
        if config.inner_name_weight > 0:
            inner_rows, inner_weights = inner_seeds(index, by_facts, config.fact_seed_weight * seed_weights)
            parts.append((inner_rows, config.inner_name_weight * inner_weights))
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    phrases, inverse = np.unique(np.concatenate([rows for rows, _ in parts]), return_inverse=True)
    weights = np.concatenate([w for _, w in parts]).astype(np.float64)
    summed = np.bincount(inverse, weights, len(phrases)).astype(np.float64, copy=False)  # in the order above
    seeded = np.flatnonzero(summed > 0)
    order = seeded[top_k(summed[seeded], len(seeded), index.phrase_rank[phrases[seeded]])]
    return phrases[order].astype(np.int64), summed[order]


@dataclass(frozen=True)
class Seeded:
    """What the default method gives PageRank for a batch of queries: each query's reset by its parts
    (None: no seed, ranked by its passage scores alone), its seed phrases, its facts, the first stage's
    passage scores and the cosines they were built from."""

    resets: list[SeedReset | None]
    seeds: list[list[tuple[str, float]]]
    evidence: list[Evidence]
    passage_scores: FloatArray
    cosines: FloatArray


def default_seeds(
    index: GraphIndex,
    query_vectors: npt.NDArray[np.float32],
    queries: Sequence[str],
    config: RetrieveConfig,
    recognition: FilterFn | None = None,
    lexical: FloatArray | None = None,
) -> Seeded:
    """The reset vectors of the default method: linked phrases, the paper's fact seeds, the passage prior.
    `lexical`: the queries' BM25 scores per passage, mixed into the passage scores (`lexical_weight`)."""
    cosines = index.dense_scores(query_vectors)
    passage_scores = first_stage(cosines, lexical, config)
    fact_scores = index.fact_scores(query_vectors, config.seed_fact_top_k, lowest=config.fact_temperature is None)
    keep = named_only if config.named_links else None
    none: tuple[IntArray, FloatArray] = (np.zeros(0, np.int64), np.zeros(0))
    links = link_seeds(index, queries, keep) if config.query_links else [none] * len(queries)
    picked = kept_facts_all(index, queries, fact_scores, config, recognition, config.seed_fact_top_k)
    resets: list[SeedReset | None] = []
    seeds: list[list[tuple[str, float]]] = []
    for qi, (_, _, kept_rows, _) in enumerate(picked):
        seed_rows, seed_weights = combined_seeds(index, links[qi], kept_rows, fact_scores[qi], config)
        if not len(seed_rows):
            resets.append(None)
            seeds.append([])
            continue
        prior = passage_prior(index.rankable(passage_scores[qi]), config.prior_weight, config.prior_temperature)
        resets.append(SeedReset(seed_rows, seed_weights, prior))
        seeds.append([(index.tables.phrases[r], float(w)) for r, w in zip(seed_rows.tolist(), seed_weights.tolist())])
    evidence = [(candidates, kept, filtered) for candidates, kept, _, filtered in picked]
    return Seeded(resets, seeds, evidence, passage_scores, cosines)


def hipporag2_default(
    index: GraphIndex,
    query_vectors: npt.NDArray[np.float32],
    queries: Sequence[str],
    config: RetrieveConfig,
    k: int,
    recognition: FilterFn | None = None,
    lexical: FloatArray | None = None,
) -> list[GraphRanking]:
    """Rank passages for each query; Personalized PageRank for each query with seeds (solved one by one).
    `lexical`: the queries' BM25 scores per passage (None: dense passage scores alone)."""
    seeded = default_seeds(index, query_vectors, queries, config, recognition, lexical)
    scores = seeded.passage_scores
    fallback = HYBRID if uses_lexical(lexical, config) else DENSE_FALLBACK
    alone = [qi for qi, reset in enumerate(seeded.resets) if reset is None]
    ranked_alone = scores
    if alone and lexical is not None:  # only the queries the graph cannot seed are fused for ranking alone
        ranked_alone = scores.copy()
        ranked_alone[alone] = ranking_scores(seeded.cosines[alone], lexical[alone], config, index.passage_alive)
    rankings = rank_full_graph(
        index, seeded.resets, ranked_alone, seeded.seeds, seeded.evidence, config.damping, k, METHOD, fallback
    )
    if not config.dense_first:
        return rankings
    return [dense_first(r, index.rankable(scores[qi]), index.passage_rank) for qi, r in enumerate(rankings)]


def uses_lexical(lexical: FloatArray | None, config: RetrieveConfig) -> bool:
    return lexical is not None and config.lexical_weight > 0


def first_stage(dense: FloatArray, lexical: FloatArray | None, config: RetrieveConfig) -> FloatArray:
    """The default method's passage scores (its prior and first passage, and the `weighted` fusion of
    `ranking_scores`): cosines, plus BM25 when given and weighed."""
    if lexical is None or config.lexical_weight <= 0:
        return dense
    return hybrid_scores(dense, lexical, config.lexical_weight)


def ranking_scores(
    dense: FloatArray, lexical: FloatArray | None, config: RetrieveConfig, alive: npt.ArrayLike
) -> FloatArray:
    """The scores a query ranked by its passage scores alone is ranked by (the `hybrid` method, and the
    default's queries without seeds): `RetrieveConfig.fusion` "significance" fuses cosines and BM25 by how far
    each stands out (`significance_scores`), "weighted" is the first stage's hybrid score; without BM25
    scores (or with `lexical_weight` 0) the cosines. `alive`: which rows are live passages."""
    if lexical is None or config.lexical_weight <= 0:
        return dense
    if config.fusion == "weighted":
        return first_stage(dense, lexical, config)
    return significance_scores(dense, lexical, alive)


def dense_first(ranking: GraphRanking, passage_scores: FloatArray, tiebreak: npt.ArrayLike) -> GraphRanking:
    """`ranking` with the first stage's best passage (the highest of `passage_scores`) moved (or put) first,
    scored as the graph's best, and the ranking's length kept. A fallback ranking is returned as it is."""
    if ranking.method in FALLBACKS or not len(ranking.rows):
        return ranking
    best = int(top_k(passage_scores, 1, tiebreak)[0])
    if int(ranking.rows[0]) == best:
        return ranking
    others = ranking.rows != best
    size = len(ranking.rows)
    rows = np.concatenate([[best], ranking.rows[others]])[:size].astype(np.int64)
    scores = np.concatenate([[float(ranking.scores[0])], ranking.scores[others]])[:size]
    return replace(ranking, rows=rows, scores=scores)
