"""HippoRAG 1 and the HippoRAG 2 ablations over a `RetrievalContext` (the glue between the context and the
pure ranking functions in `hipporag1` and `ablations`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from engram.errors import InputError
from engram.retrieve.context import RetrievalContext
from engram.retrieve.method_names import NEEDS_ENTITIES
from engram.retrieve.query_ner import QueryEntities, query_entities_many
from engram.text import normalize_phrase
from engram.types import Retrieval


def resolve_entities(ctx: RetrievalContext, queries: Sequence[str], given: QueryEntities | None) -> list[list[str]]:
    """Each query's entities: from `given` (keyed by query text) when it has the query, else from the LLM's
    query NER, else none (the query is then ranked densely)."""
    if given is None and ctx.chat is None:
        raise InputError(
            "this method needs the query's named entities: configure an LLM or pass query_entities "
            "(engram eval --query-entities FILE)"
        )
    if given is not None:
        _check_entities(given)
    out: list[list[str]] = [[str(e) for e in given[q]] if given is not None and q in given else [] for q in queries]
    asked = [i for i, q in enumerate(queries) if given is None or q not in given]
    if ctx.chat is not None and asked:  # the LLM's calls of the batch run concurrently
        for i, entities in zip(asked, query_entities_many(ctx.chat, [queries[i] for i in asked])):
            out[i] = entities
    return out


def _check_entities(given: QueryEntities) -> None:
    """`given` maps each query to a list of entity names: a name by itself would be read letter by letter."""
    if not isinstance(given, Mapping):
        raise InputError(f"query_entities maps each query to a list of entity names, not a {type(given).__name__}")
    for query, names in given.items():
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise InputError(f"query_entities[{query!r}] must be a list of entity names, e.g. [{names!r}]")


def embed_entities(ctx: RetrievalContext, entity_lists: Sequence[Sequence[str]]) -> list[npt.NDArray[np.float32]]:
    """One (entities x dim) array per query; entities are normalised as phrase nodes are, and embedded in one
    batch with the phrase role."""
    normalised = [[n for n in dict.fromkeys(normalize_phrase(e) for e in ents) if n] for ents in entity_lists]
    unique = sorted({e for ents in normalised for e in ents})
    if not unique:
        return [np.zeros((0, ctx.dim), dtype=np.float32) for _ in normalised]
    vectors = ctx.embed(unique, "phrase")
    where = {e: i for i, e in enumerate(unique)}
    return [
        np.asarray(vectors[[where[e] for e in ents]], dtype=np.float32)
        if ents
        else np.zeros((0, ctx.dim), dtype=np.float32)
        for ents in normalised
    ]


def run_variant(
    ctx: RetrievalContext, queries: list[str], k: int, method: str, given: QueryEntities | None = None
) -> list[Retrieval]:
    from engram.retrieve.ablations import ner_to_node, no_passage_nodes, query_to_node
    from engram.retrieve.hipporag1 import hipporag1
    from engram.retrieve.hipporag2 import PAPER, hipporag2
    from engram.retrieve.results import filter_fn, from_ranking

    index, config = ctx.view, ctx.config
    vectors = ctx.embed_queries(queries)
    if method in NEEDS_ENTITIES:
        entity_vectors = embed_entities(ctx, resolve_entities(ctx, queries, given))
        if method == "hipporag1":
            rankings = hipporag1(index, vectors, entity_vectors, config, k)
        else:
            rankings = ner_to_node(index, vectors, entity_vectors, config, k)
    elif method == "hipporag2-query-to-node":
        rankings = query_to_node(index, vectors, config, k)
    elif method == "hipporag2-no-passage-nodes":
        rankings = no_passage_nodes(index, vectors, queries, config, k, filter_fn(ctx))
    elif method == "hipporag2-no-filter":
        plain = hipporag2(index, vectors, queries, config, k, None)
        rankings = [replace(r, method=method) if r.method == PAPER else r for r in plain]
    else:
        raise InputError(f"unknown retrieval variant {method!r}")
    return [from_ranking(index, q, r) for q, r in zip(queries, rankings)]
