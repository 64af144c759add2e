"""`Memory`'s inspection API (`graph`, `index_loads`) against hand-written triples whose graph is known exactly,
and the rule that keeps tests on the public API: no test reaches into a private member of `Memory`."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

import engram
from engram import Document, GraphConfig, GraphSnapshot, Memory, MemoryConfig
from engram.embed import HashEmbedder

TESTS = Path(__file__).resolve().parent
MEMORY_SOURCE = TESTS.parent / "src" / "engram" / "memory.py"
CONFIG = MemoryConfig(graph=GraphConfig(synonym_threshold=0.5, synonym_top_k=10, context_weight=0.25))
DOCS = [
    Document("a", "Anna Berg founded the old mill."),
    Document("b", "The old mill is near north river, and so are the old mills."),
    Document("c", "Anna Berg founded the old mill, again."),
    Document("p", "Nothing was extracted from this one."),
]
TRIPLES = {
    "a": [["Anna Berg", "founded", "old mill"]],
    "b": [["old mill", "is near", "North River"], ["old mills", "is near", "north river"]],
    "c": [["Anna Berg", "founded", "Old Mill"]],
}
EXTRACTIONS = [{"id": k, "triples": v} for k, v in TRIPLES.items()]  # "p" stays pending
PHRASES = ("anna berg", "north river", "old mill", "old mills")  # the triples' names, normalised


def open_memory(path: Path) -> Memory:
    return Memory(path, embedder=HashEmbedder(dim=64), llm=False, config=CONFIG)


def pair(a: str, b: str) -> tuple[str, str]:
    x, y = sorted((a, b))
    return x, y


def expected_synonyms() -> dict[tuple[str, str], float]:
    """Phrase pairs whose cosine reaches the threshold, by an exhaustive float64 search (each phrase has fewer
    than `synonym_top_k` others, so no list is cut), over the vectors as a memory stores them (float16)."""
    embedded = HashEmbedder(dim=64).embed(list(PHRASES), role="phrase")
    vectors = np.asarray(embedded, dtype=np.float16).astype(np.float64)
    found = {}
    for i, j in itertools.combinations(range(len(PHRASES)), 2):
        cosine = float(vectors[i] @ vectors[j])
        if cosine >= CONFIG.graph.synonym_threshold:
            found[pair(f"p:{PHRASES[i]}", f"p:{PHRASES[j]}")] = cosine
    return found


def test_the_graph_of_hand_written_triples(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m") as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        graph = memory.graph()
    assert graph.passages == ("a", "b", "c", "p")  # the pending passage is a node without edges
    assert graph.phrases == PHRASES
    assert graph.facts == (
        ("anna berg", "founded", "old mill"),
        ("old mill", "is near", "north river"),
        ("old mills", "is near", "north river"),
    )
    assert dict(graph.relation_edges) == {  # weighted by the passages stating them: a and c state the first
        ("p:anna berg", "p:old mill"): 2.0,
        ("p:north river", "p:old mill"): 1.0,
        ("p:north river", "p:old mills"): 1.0,
    }
    mentions = {"a": ["anna berg", "old mill"], "b": ["north river", "old mill", "old mills"]}
    mentions["c"] = mentions["a"]
    context = {pair(f"d:{d}", f"p:{k}"): 0.25 for d, names in mentions.items() for k in names}
    assert dict(graph.context_edges) == context
    synonyms = expected_synonyms()
    assert ("p:old mill", "p:old mills") in synonyms  # the data has a synonym pair to find
    assert graph.synonym_edges.keys() == synonyms.keys()
    for edge, cosine in synonyms.items():
        assert graph.synonym_edges[edge] == pytest.approx(cosine, abs=1e-6), edge
    summed: dict[tuple[str, str], float] = {}
    for kind in (graph.relation_edges, graph.synonym_edges, graph.context_edges):
        for edge, weight in kind.items():
            summed[edge] = summed.get(edge, 0.0) + weight
    assert graph.edges.keys() == summed.keys()
    assert all(graph.edges[e] == pytest.approx(w, abs=1e-8) for e, w in summed.items())
    assert dict(graph.counts) == {
        "passages": 4,
        "phrases": 4,
        "facts": 3,
        "relation_edges": 3,
        "synonym_edges": len(synonyms),
        "context_edges": 7,
        "edges": 10 + len(synonyms),
        "pending": 1,
        "failed": 0,
    }


def test_deleted_documents_leave_the_graph(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m") as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        memory.delete(["b", "c"])
        graph = memory.graph()
    assert graph.passages == ("a", "p") and graph.phrases == ("anna berg", "old mill")
    assert graph.facts == (("anna berg", "founded", "old mill"),)
    assert dict(graph.relation_edges) == {("p:anna berg", "p:old mill"): 1.0}  # only a states it now
    assert dict(graph.synonym_edges) == {}  # "old mills" died with b
    assert set(graph.context_edges) == {("d:a", "p:anna berg"), ("d:a", "p:old mill")}
    assert graph.edges.keys() == graph.relation_edges.keys() | graph.context_edges.keys()  # no dead node's edge


def test_an_empty_memory_has_an_empty_graph(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m") as memory:
        graph = memory.graph()
    assert graph.passages == graph.phrases == graph.facts == ()
    assert not graph.edges and not graph.relation_edges and graph.counts["edges"] == 0


def test_the_snapshot_is_a_frozen_copy(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m") as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        graph = memory.graph()
        kept = dataclasses.replace(graph)
        with pytest.raises(dataclasses.FrozenInstanceError):
            graph.passages = ()  # type: ignore[misc]
        for table in (graph.edges, graph.relation_edges, graph.synonym_edges, graph.context_edges):
            with pytest.raises(TypeError):
                table[("p:x", "p:y")] = 1.0  # type: ignore[index]
        with pytest.raises(TypeError):
            graph.counts["passages"] = 0  # type: ignore[index]
        memory.delete(["b"])  # the memory changes; the snapshot taken before does not
        assert graph == kept and ("p:north river", "p:old mill") in graph.relation_edges
        assert memory.graph() != graph and "old mills" not in memory.graph().phrases


def test_equal_graphs_compare_equal_whatever_the_order_they_were_built_in(tmp_path: Path) -> None:
    with open_memory(tmp_path / "one") as one, open_memory(tmp_path / "two") as two:
        one.index(DOCS, extractions=EXTRACTIONS)
        for doc in reversed(DOCS):
            two.index([doc], extractions=[e for e in EXTRACTIONS if e["id"] == doc.id])
        assert one.graph() == two.graph()
        two.delete(["c"])
        assert one.graph() != two.graph()
        assert "GraphSnapshot" in engram.__all__ and isinstance(one.graph(), GraphSnapshot)


def last_generation_unlogged(path: Path) -> None:
    """Drop the commit log's newest row, as an engram without the log commits: its readers must reload."""
    with closing(sqlite3.connect(path / "engram.sqlite")) as db, db:
        db.execute("DELETE FROM commits WHERE generation = (SELECT MAX(generation) FROM commits)")


def test_index_loads_counts_whole_loads_and_not_replays(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m") as writer, open_memory(tmp_path / "m") as reader:
        assert reader.index_loads == 0  # opening reads no index
        reader.stats()
        assert reader.index_loads == 1
        writer.index(DOCS[:2], extractions=EXTRACTIONS[:2])
        assert reader.index_loads == 1  # reading the counter loads nothing
        assert reader.graph().passages == ("a", "b") and reader.index_loads == 1  # the log replayed
        writer.delete(["a"])
        last_generation_unlogged(tmp_path / "m")
        assert reader.graph().passages == ("b",) and reader.index_loads == 2  # no log row: reloaded
        reader.index(DOCS[2:3], extractions=EXTRACTIONS[2:3])
        assert reader.index_loads == 2  # its own commit
        assert writer.graph() == reader.graph() and writer.index_loads == 1


# the rule: tests use `Memory` through its public API -------------------------------------------------------
def memory_privates() -> set[str]:
    """The private members of `Memory`: underscore methods and attributes its source defines or assigns."""
    names = set()
    tree = ast.parse(MEMORY_SOURCE.read_text(encoding="utf-8"))
    (memory,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Memory"]
    for node in ast.walk(memory):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_uses(source: str, private: set[str]) -> list[tuple[int, str]]:
    """(line, text) of each `<anything>._name` or `getattr(<anything>, "_name")` with `_name` in `private`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in private:
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"):
            named = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            if named and named[0] in private:
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_rule_finds_what_it_forbids() -> None:
    private = memory_privates()
    assert {"_live", "_store", "_writer", "_current", "_source", "_peers", "_llm_session"} <= private
    assert not any(n.startswith("__") for n in private) and "graph" not in private
    code = "m._live.load()\nx = getattr(m, '_store')\nm.graph()\nm._other\nm.__class__\n"
    assert sorted(line for line, _ in private_uses(code, private)) == [1, 2]


def test_no_test_uses_a_private_member_of_memory() -> None:
    private = memory_privates()
    uses = [
        f"{path.name}:{line}: {text}"
        for path in sorted(TESTS.glob("*.py"))
        for line, text in private_uses(path.read_text(encoding="utf-8"), private)
    ]
    assert not uses, "tests reach into Memory (use Memory.graph(), context(), stats() or tests/rooms.py):\n" + (
        "\n".join(uses)
    )
