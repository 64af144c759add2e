"""Continual learning: any sequence of index, delete and update equals a build from scratch on the survivors, and
its graph equals the one the independent batch builder (engram.graph.build) makes from the survivors' triples."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram import Document, GraphConfig, GraphSnapshot, InputError, Memory, MemoryConfig
from engram.embed import HashEmbedder
from engram.graph.build import assemble_adjacency, build_tables, synonym_edges
from helpers import CountingEmbedder
from rooms import Rooms

PHRASES = [
    "north river",
    "north river bank",
    "river bank",
    "old mill",
    "old mill town",
    "mill town",
    "Anna Berg",
    "Anna Bergström",
    "Berg family",
    "1901",
    "1910",
    "Lake Oster",
]
RELATIONS = ["is near", "founded", "owned by", "built in"]
QUERIES = ["Who owned the old mill?", "river bank near the mill town", "Anna Berg family", "built in 1901"]
CONFIG = MemoryConfig(graph=GraphConfig(synonym_threshold=0.5, synonym_top_k=2))

triple = st.tuples(st.sampled_from(PHRASES), st.sampled_from(RELATIONS), st.sampled_from(PHRASES))
content = st.tuples(st.lists(triple, min_size=0, max_size=3), st.booleans(), st.integers(0, 3))
doc_ids = st.sampled_from([f"doc{i}" for i in range(6)])
operation = st.one_of(
    st.tuples(st.just("index"), st.lists(st.tuples(doc_ids, content), min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.lists(doc_ids, min_size=1, max_size=2)),
    st.tuples(st.just("update"), st.tuples(doc_ids, content)),
)


def make(doc_id: str, spec: tuple[list[tuple[str, str, str]], bool, int]) -> tuple[Document, dict[str, Any] | None]:
    triples, extracted, variant = spec
    text = ". ".join(" ".join(t) for t in triples) or "An empty note"
    doc = Document(doc_id, f"{text}. Version {variant}.", title=f"Note {variant}")
    extraction = {"id": doc_id, "entities": [], "triples": [list(t) for t in triples]} if extracted else None
    return doc, extraction


Live = dict[str, tuple[Document, dict[str, Any] | None]]


def apply(memory: Memory, live: Live, op: Any, known: dict[tuple[Any, str], dict[str, Any]]) -> None:
    """Run one operation, tracking the surviving documents and, per content, the extraction the memory holds
    for it (extractions are kept by content: re-adding a text reuses the one given for it before)."""
    kind, arg = op
    if kind == "index":
        batch = {i: make(i, spec) for i, spec in arg if i not in live}
        memory.index([d for d, _ in batch.values()], extractions=[e for _, e in batch.values() if e])
        live.update(batch)
        known.update(((d.title, d.text), e) for d, e in batch.values() if e)
    elif kind == "delete":
        memory.delete(arg)
        for i in arg:
            live.pop(i, None)
    else:
        doc_id, spec = arg
        doc, extraction = make(doc_id, spec)
        unchanged = doc_id in live and live[doc_id][0] == doc
        memory.update(doc, extractions=[extraction] if extraction else None)
        live[doc_id] = (doc, extraction)
        if extraction and not unchanged:
            known[(doc.title, doc.text)] = extraction


def vectors_by_key(memory: Memory | Rooms) -> dict[str, bytes]:
    index = memory.context().view
    out = {}
    for row, p in enumerate(index.passages):
        if index.passage_alive[row]:
            out[f"d:{p.id}"] = np.asarray(index.passage_vectors[row]).tobytes()
    for row, key in enumerate(index.tables.phrases):
        if index.phrase_alive[row]:
            out[f"p:{key}"] = np.asarray(index.phrase_vectors[row]).tobytes()
    for row, fact in enumerate(index.tables.facts):
        if index.fact_alive[row]:
            out[f"f:{fact}"] = np.asarray(index.fact_vectors[row]).tobytes()
    return out


def observe(memory: Memory | Rooms) -> dict[str, Any]:
    graph = memory.graph()
    results = {m: memory.retrieve(QUERIES, top_k=4, method=m) for m in ("hipporag2", "dense", "bm25")}
    stats = memory.stats()
    return {
        "graph": graph,
        "vectors": vectors_by_key(memory),
        "stats": dict(graph.counts),  # counted on the view
        "state_stats": {k: stats[k] for k in graph.counts},  # counted without the view: must agree with it
        "ranked": {
            m: [
                (r.method, [p.id for p in r.passages], [f.triple for f in r.facts], [s.phrase for s in r.seeds])
                for r in rs
            ]
            for m, rs in results.items()
        },
        "scores": {m: [p.score for r in rs for p in r.passages] for m, rs in results.items()},
    }


def oracle_graph(live: Live, known: dict[tuple[Any, str], dict[str, Any]], embedder: HashEmbedder) -> dict[str, Any]:
    """The graph of the surviving documents built by the independent batch builder (engram.graph.build), which
    shares no code with the live index state: tables from the triples, exact synonym search, one adjacency."""
    docs = sorted((d for d, _ in live.values()), key=lambda d: d.id)
    triples = [known.get((d.title, d.text), {}).get("triples", []) for d in docs]
    tables = build_tables(triples)
    vectors = embedder.embed(tables.phrases, role="phrase") if tables.phrases else np.zeros((0, embedder.dim))
    stored = np.asarray(vectors, dtype=np.float16).astype(np.float32)  # a memory stores phrase vectors as float16
    synonyms = synonym_edges(stored, CONFIG.graph.synonym_threshold, CONFIG.graph.synonym_top_k)
    upper = sp.triu(assemble_adjacency(tables, len(docs), synonyms, CONFIG.graph.context_weight)).tocoo()
    names = [f"p:{k}" for k in tables.phrases] + [f"d:{d.id}" for d in docs]
    edges = {
        tuple(sorted((names[i], names[j]))): float(w)
        for i, j, w in zip(upper.row.tolist(), upper.col.tolist(), upper.data.tolist())
    }
    return {"passages": [d.id for d in docs], "phrases": tables.phrases, "facts": tables.facts, "edges": edges}


def matches_oracle(graph: GraphSnapshot, oracle: dict[str, Any]) -> None:
    assert list(graph.passages) == oracle["passages"]
    assert list(graph.phrases) == oracle["phrases"] and list(graph.facts) == oracle["facts"]
    assert graph.edges.keys() == oracle["edges"].keys()
    for edge, weight in oracle["edges"].items():  # float32 batch cosines against the state's float64 ones
        assert graph.edges[edge] == pytest.approx(weight, abs=1e-6), edge


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Equal graphs, vectors, stats, rankings and scores (to the last bit)."""
    assert a["stats"] == a["state_stats"] and b["stats"] == b["state_stats"]
    assert {k: v for k, v in a.items() if k != "scores"} == {k: v for k, v in b.items() if k != "scores"}
    assert a["scores"] == b["scores"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=6))
def test_any_sequence_equals_a_fresh_build(ops: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        live: Live = {}
        known: dict[tuple[Any, str], dict[str, Any]] = {}
        with Memory(Path(tmp) / "inc", embedder=HashEmbedder(dim=64), config=CONFIG) as memory:
            for op in ops:
                apply(memory, live, op, known)
            incremental = observe(memory)
        matches_oracle(incremental["graph"], oracle_graph(live, known, HashEmbedder(dim=64)))
        with Memory(Path(tmp) / "inc", embedder=HashEmbedder(dim=64), config=CONFIG) as reopened:
            same(observe(reopened), incremental)
        with Memory(Path(tmp) / "fresh", embedder=HashEmbedder(dim=64), config=CONFIG) as fresh:
            extractions = [{**e, "id": d.id} for d, _ in live.values() if (e := known.get((d.title, d.text)))]
            fresh.index([d for d, _ in live.values()], extractions=extractions)
            same(observe(fresh), incremental)


def test_delete_removes_unsupported_facts_and_lowers_support(tmp_path: Path) -> None:
    docs = [
        Document("a", "Anna Berg founded the old mill."),
        Document("b", "Anna Berg founded the old mill too."),
        Document("c", "The old mill is near north river."),
    ]
    ex = [
        {"id": "a", "triples": [["Anna Berg", "founded", "old mill"]]},
        {"id": "b", "triples": [["Anna Berg", "founded", "old mill"]]},
        {"id": "c", "triples": [["old mill", "is near", "north river"]]},
    ]
    with Memory(tmp_path / "m", embedder=HashEmbedder(), config=CONFIG) as memory:
        memory.index(docs, extractions=ex)
        edges = memory.graph().edges
        assert edges[("p:anna berg", "p:old mill")] >= 2.0
        report = memory.delete(["b", "c", "missing"])
        assert report.skipped == {"missing": "not in the memory"} and report.documents == 2
        graph = memory.graph()
        assert graph.passages == ("a",) and graph.phrases == ("anna berg", "old mill")
        assert graph.edges[("p:anna berg", "p:old mill")] < edges[("p:anna berg", "p:old mill")]
        hits = memory.retrieve("north river", top_k=5, method="dense")[0].passages
        assert [p.id for p in hits] == ["a"]


def test_update_keeps_unchanged_chunks_without_llm_or_embedding(tmp_path: Path) -> None:
    source = CountingEmbedder()
    with Memory(tmp_path / "m", embedder=source, config=CONFIG) as memory:
        memory.index(
            [Document("d", "The old mill is near north river.")],
            extractions=[{"id": "d", "triples": [["old mill", "is near", "north river"]]}],
        )
        before = source.embedded
        report = memory.update(Document("d", "The old mill is near north river."))
        assert report.unchanged == 1 and source.embedded == before
        memory.update(Document("d", "The old mill town is on Lake Oster."))
        assert memory.stats()["facts"] == 0 and memory.stats()["pending"] == 1
        memory.update(Document("d", "The old mill is near north river."))  # back: extraction and vectors cached
        assert source.embedded == before + 1  # only the new text's passage vector was ever computed
        assert memory.stats()["facts"] == 1 and memory.stats()["pending"] == 0


def test_a_view_stays_valid_while_later_commits_grow_the_state(tmp_path: Path) -> None:
    from engram.retrieve.hipporag2 import hipporag2

    with Memory(tmp_path / "m", embedder=HashEmbedder(), config=CONFIG) as memory:
        memory.index(
            [Document("a", "Anna Berg founded the old mill.")],
            extractions=[{"id": "a", "triples": [["Anna Berg", "founded", "old mill"]]}],
        )
        old = memory.context().view
        query = memory.context().embed_queries(["Who founded the old mill?"])
        before = hipporag2(old, query, ["q"], memory.config.retrieve, 3)[0]
        memory.index(
            [Document("b", "The old mill town is near north river.")],
            extractions=[{"id": "b", "triples": [["old mill town", "is near", "north river"]]}],
        )
        after = hipporag2(old, query, ["q"], memory.config.retrieve, 3)[0]
        assert after.rows.tolist() == before.rows.tolist() and after.scores.tolist() == before.scores.tolist()
        assert old.phrases_of("a") == ["anna berg", "old mill"]


def test_phrase_death_and_birth_in_one_update_keep_lists_exact(tmp_path: Path) -> None:
    config = MemoryConfig(graph=GraphConfig(synonym_threshold=0.5, synonym_top_k=2))
    d1 = Document("d1", "Acme corporation inc.")
    d2 = Document("d2", "Acme corporation and acme corporations.")
    ex = [
        {"id": "d1", "triples": [["acme corporation inc", "is", "company"]]},
        {"id": "d2", "triples": [["acme corporation", "is", "acme corporations"]]},
    ]
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64), config=config) as memory:
        memory.index([d1, d2], extractions=ex)
        changed = Document("d1", "Acme corporation ltd.")
        memory.update(changed, extractions=[{"id": "d1", "triples": [["acme corporation ltd", "is", "company"]]}])
        incremental = observe(memory)
    with Memory(tmp_path / "fresh", embedder=HashEmbedder(dim=64), config=config) as fresh:
        fresh.index(
            [changed, d2], extractions=[{"id": "d1", "triples": [["acme corporation ltd", "is", "company"]]}, ex[1]]
        )
        same(observe(fresh), incremental)


def test_update_to_empty_text_is_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index([Document("a", "Some text.")])
        with pytest.raises(InputError, match="delete"):
            memory.update(Document("a", "   "))
        assert set(memory.documents()) == {"a"}
