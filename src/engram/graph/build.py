"""Graph construction: phrase and fact tables from extractions, synonym kNN, and the adjacency matrix.

Node order: phrase nodes 0..P-1, then passage nodes P..P+N-1. Every logical edge appears once and is
undirected (the adjacency matrix is symmetric). Weights:

* relation edge (subject <-> object of a triple): the number of passages whose extraction links the two
  phrases (its support); a triple whose subject and object normalise to the same phrase adds no edge;
* synonym edge (phrase <-> phrase, cosine >= threshold): the cosine similarity;
* context edge (passage <-> each phrase of its triples): 1.0.

Where a relation and a synonym edge join the same pair, their weights add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.text import normalize_phrase
from engram.types import Triple

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class GraphTables:
    """Phrases, facts and links derived from the passages' triples; sorted, so the same extractions always
    give the same tables whatever order they were indexed in."""

    phrases: Sequence[str]
    facts: Sequence[Triple]
    fact_phrases: IntArray  # (F, 2): subject and object phrase index of each fact
    context: IntArray  # (C, 2): (passage row, phrase index), unique
    relation: IntArray  # (R, 2): phrase pairs i < j
    relation_support: FloatArray  # (R,)
    dropped: int  # triples with an empty part after normalisation


def normalize_triple(triple: Sequence[object]) -> Triple | None:
    """The normalised key of a triple, or None when it is not three non-empty strings after normalisation."""
    if len(triple) != 3:
        return None
    parts = [normalize_phrase(str(part)) if isinstance(part, (str, int, float)) else "" for part in triple]
    if not all(parts):
        return None
    return (parts[0], parts[1], parts[2])


def build_tables(passage_triples: Sequence[Sequence[Sequence[object]]]) -> GraphTables:
    """Tables for passages given, in row order, by their raw triples."""
    per_passage: list[set[Triple]] = []
    dropped = 0
    for triples in passage_triples:
        keys = [normalize_triple(t) for t in triples]
        dropped += sum(1 for k in keys if k is None)
        per_passage.append({k for k in keys if k is not None})
    facts: list[Triple] = sorted(set().union(*per_passage)) if per_passage else []
    phrases = sorted({p for s, _, o in facts for p in (s, o)})
    phrase_index = {p: i for i, p in enumerate(phrases)}
    fact_phrases = np.array([[phrase_index[s], phrase_index[o]] for s, _, o in facts], dtype=np.int64)
    context: set[tuple[int, int]] = set()
    support: dict[tuple[int, int], int] = {}
    for row, passage_facts in enumerate(per_passage):
        pairs: set[tuple[int, int]] = set()
        for s, _, o in passage_facts:
            a, b = phrase_index[s], phrase_index[o]
            context.update(((row, a), (row, b)))
            if a != b:
                pairs.add((min(a, b), max(a, b)))
        for pair in pairs:
            support[pair] = support.get(pair, 0) + 1
    relation = sorted(support)
    return GraphTables(
        phrases=phrases,
        facts=facts,
        fact_phrases=fact_phrases.reshape(-1, 2),
        context=np.array(sorted(context), dtype=np.int64).reshape(-1, 2),
        relation=np.array(relation, dtype=np.int64).reshape(-1, 2),
        relation_support=np.array([support[p] for p in relation], dtype=np.float64),
        dropped=dropped,
    )


def synonym_edges(
    vectors: npt.NDArray[np.float32], threshold: float = 0.8, top_k: int = 100, block: int = 1024
) -> tuple[IntArray, FloatArray]:
    """Pairs (i < j) of rows whose cosine is >= threshold, keeping each row's `top_k` nearest above the
    threshold (a pair stays if either end keeps it). Rows must be L2-normalised. Works in row blocks, so
    memory is O(block x n), never n x n. Returns (pairs (S, 2), similarities (S,))."""
    n = len(vectors)
    found: dict[tuple[int, int], float] = {}
    for start in range(0, n, block):
        sims = vectors[start : start + block] @ vectors.T
        for offset, row in enumerate(sims):
            i = start + offset
            row[i] = -1.0
            candidates = np.flatnonzero(row >= threshold)
            if len(candidates) > top_k:
                order = np.argsort(-row[candidates], kind="stable")[:top_k]
                candidates = candidates[order]
            for j in candidates.tolist():
                found[(min(i, j), max(i, j))] = float(row[j])
    pairs = sorted(found)
    return (
        np.array(pairs, dtype=np.int64).reshape(-1, 2),
        np.array([found[p] for p in pairs], dtype=np.float64),
    )


def assemble_adjacency(
    tables: GraphTables,
    n_passages: int,
    synonyms: tuple[IntArray, FloatArray],
    context_weight: float = 1.0,
) -> sp.csr_matrix:
    """The symmetric weighted adjacency matrix over phrase nodes then passage nodes."""
    n_phrases = len(tables.phrases)
    syn_pairs, syn_weights = synonyms
    ctx_passages = tables.context[:, 0] + n_phrases
    ctx_phrases = tables.context[:, 1]
    src = np.concatenate([tables.relation[:, 0], syn_pairs[:, 0], ctx_phrases])
    dst = np.concatenate([tables.relation[:, 1], syn_pairs[:, 1], ctx_passages])
    weights = np.concatenate(
        [tables.relation_support, syn_weights, np.full(len(ctx_phrases), context_weight, dtype=np.float64)]
    )
    n = n_phrases + n_passages
    upper = sp.coo_matrix((weights, (src, dst)), shape=(n, n))
    return sp.csr_matrix(upper + upper.T)
