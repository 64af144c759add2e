"""HippoRAG 1 (phrase graph, query entities from a file or the LLM) and the HippoRAG 2 ablations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from engram import Memory
from engram.embed import HashEmbedder
from engram.errors import InputError
from engram.retrieve.method_names import METHODS
from engram.retrieve.peers import PEERS
from engram.retrieve.phrase_graph import (
    context_matrix,
    link_nearest,
    phrase_graph_passage_scores,
    phrase_operator,
    rank_with_tiebreak,
    specificity_seeds,
)
from engram.retrieve.query_ner import QUERY_NER_SYSTEM, load_query_entities, query_entities
from fake_openai import FakeOpenAI, last_user_text
from helpers import DOCS, EXTRACTIONS

Q_ACME = "Where was the founder of Acme Tools born?"
Q_ZENITH = "Who founded Zenith Foods?"


def build(path: Path, llm: Any = None) -> Memory:
    memory = Memory(path, embedder=HashEmbedder(), llm=llm)
    memory.index(DOCS, extractions=EXTRACTIONS)
    return memory


def test_phrase_graph_pure_functions() -> None:
    # phrases 0-1-2 in a chain (relation edges), passages 0 {0, 1} and 1 {2}; passage node block ignored
    adjacency = sp.csr_matrix(np.array([[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0]], dtype=float))
    operator = phrase_operator(adjacency, np.arange(3))
    assert operator.shape == (3, 3)
    context = context_matrix(np.array([[0, 0], [0, 1], [1, 2]]), 2, 3)
    scores = phrase_graph_passage_scores(operator, context, np.array([[1.0], [0.0], [0.0]]), 0.5)
    # PPR from phrase 0 on the path 0-1-2, damping 0.5 (node 1 splits its mass between 0 and 2):
    # p0 = 0.5 + 0.5 * p1 / 2, p1 = 0.5 * (p0 + p2), p2 = 0.5 * p1 / 2
    a = np.array([[1.0, -0.25, 0.0], [-0.5, 1.0, -0.5], [0.0, -0.25, 1.0]])
    p = np.linalg.solve(a, np.array([0.5, 0.0, 0.0]))
    assert scores[:, 0] == pytest.approx([p[0] + p[1], p[2]])
    rows, sims = link_nearest(np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([[1.0, 0.0], [0.6, 0.8]]))
    assert rows.tolist() == [1, 0] and sims.tolist() == pytest.approx([0.8, 1.0])
    seeds, weights = specificity_seeds(np.array([2, 0, 2]), np.array([4.0, 1.0, 2.0]))
    assert seeds.tolist() == [0, 2] and weights.tolist() == pytest.approx([0.25, 1.0])  # row 2 linked twice
    assert rank_with_tiebreak([0.0, 1.0, 0.0, 0.0], [0.1, 0.0, 0.5, 0.5], 4).tolist() == [1, 2, 3, 0]


def test_an_entity_links_its_best_phrase_and_ties_go_to_the_lowest_tiebreak() -> None:
    """`link_nearest` against a brute-force oracle on vectors with many exact ties (each phrase one of three
    unit vectors), dead rows skipped, ties resolved by the tiebreak order and without one by the row."""
    rng = np.random.default_rng(3)
    basis = np.eye(4)[:3]
    phrases = basis[rng.integers(0, 3, 40)]
    entities = np.vstack([basis, rng.random((5, 4))])
    alive = rng.random(40) < 0.8
    tiebreak = rng.permutation(40)
    for order in (tiebreak, None):
        rows, sims = link_nearest(entities, phrases, alive, order)
        rank = np.arange(40) if order is None else order
        for e, (row, sim) in enumerate(zip(rows.tolist(), sims.tolist())):
            scores = {r: float(phrases[r] @ entities[e]) for r in range(40) if alive[r]}
            want = min(scores, key=lambda r: (-scores[r], rank[r]))
            assert row == want and sim == pytest.approx(scores[want])


def test_hipporag1_from_query_entities(tmp_path: Path) -> None:
    entities = {Q_ACME: ["Acme Tools"], Q_ZENITH: ["Zenith Foods"]}
    with build(tmp_path / "m") as memory:
        acme, zenith = memory.retrieve([Q_ACME, Q_ZENITH], top_k=5, method="hipporag1", query_entities=entities)
        assert acme.method == "hipporag1" and acme.seeds[0].phrase == "acme tools"
        # acme tools -> alice moreau (relation) -> the founder's passage, then lyon
        assert [p.id for p in acme.passages[:2]] == ["acme", "alice"]
        assert zenith.passages[0].id == "bob" and zenith.seeds[0].phrase == "zenith foods"
        assert len({p.id for p in acme.passages}) == 5
        # a query absent from the mapping, with no LLM, is ranked densely
        other = memory.retrieve("capital of Norway", method="hipporag1", query_entities=entities)[0]
        assert other.method == "dense"
        with pytest.raises(InputError, match="named entities"):
            memory.retrieve(Q_ACME, method="hipporag1")


def test_query_entities_file_formats(tmp_path: Path) -> None:
    jsonl = tmp_path / "e.jsonl"
    jsonl.write_text(
        json.dumps({"id": "q1", "question": Q_ACME, "entities": ["Acme Tools"]})
        + "\n"
        + json.dumps({"id": "q2", "entities": ["Zenith Foods"]})
        + "\n"
    )
    assert load_query_entities(jsonl) == {Q_ACME: ["Acme Tools"], "q1": ["Acme Tools"], "q2": ["Zenith Foods"]}
    mapping = tmp_path / "e.json"
    mapping.write_text(json.dumps({Q_ACME: ["Acme Tools"]}))
    assert load_query_entities(mapping) == {Q_ACME: ["Acme Tools"]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "q1"}) + "\n" + json.dumps({"id": "q2"}) + "\n")
    with pytest.raises(InputError, match="entities"):
        load_query_entities(bad)


def ner_handler(request: dict[str, Any]) -> str | None:
    if request["messages"][0]["content"] != QUERY_NER_SYSTEM:
        return None
    text = last_user_text(request)
    found = [name for name in ("Acme Tools", "Zenith Foods", "Norway") if name in text]
    return json.dumps({"entities": found})


def test_hipporag1_through_the_llm(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = ner_handler
    with build(tmp_path / "m", llm=fake_llm.chat()) as memory:
        acme, zenith = memory.retrieve([Q_ACME, Q_ZENITH], top_k=3, method="hipporag1")
    assert acme.passages[0].id == "acme" and zenith.passages[0].id == "bob"
    assert [s.phrase for s in acme.seeds] == ["acme tools"]
    ner = [r for r in fake_llm.requests if r["messages"][0]["content"] == QUERY_NER_SYSTEM]
    assert len(ner) == 2 and ner[0]["response_format"] == {"type": "json_object"}


def test_query_ner_repairs_once_then_gives_up(fake_llm: FakeOpenAI) -> None:
    chat = fake_llm.chat()
    fake_llm.push("not json", '{"entities": ["Acme Tools", "Acme Tools", "", 7]}')
    assert query_entities(chat, Q_ACME) == ["Acme Tools", "7"]
    fake_llm.push("nope", '{"names": []}')
    assert query_entities(chat, Q_ACME) == []
    assert fake_llm.attempts == 4


def test_every_method_runs_and_ablations_differ(tmp_path: Path) -> None:
    entities = {Q_ACME: ["Acme Tools"], Q_ZENITH: ["Zenith Foods"]}
    with build(tmp_path / "m") as memory:
        results = {
            m: memory.retrieve([Q_ACME, Q_ZENITH], top_k=5, method=m, query_entities=entities)
            for m in METHODS
            if m not in PEERS and not m.startswith("rse-")  # peers need their own index; rse returns segments
        }
    for method, (acme, zenith) in results.items():
        assert acme.method == method and len(acme.passages) == 5, method
        assert zenith.passages[0].id == "bob", method
    nodes = results["hipporag2-query-to-node"][0]
    assert nodes.seeds and not nodes.facts  # linked to phrases directly, no facts
    no_passages = results["hipporag2-no-passage-nodes"][0]
    assert no_passages.facts and no_passages.seeds  # facts linked as in hipporag2
    assert [p.id for p in results["hipporag2-no-filter"][0].passages] == [
        p.id for p in results["hipporag2-paper"][0].passages
    ]  # without an LLM the filter never runs

    def ranking(method: str) -> list[tuple[str, float]]:
        return [(p.id, round(p.score, 9)) for r in results[method] for p in r.passages]

    # each ablation changes what it says it changes, so its ranking (ids and scores) differs from the paper's
    paper = ranking("hipporag2-paper")
    ablations = ["hipporag2-ner-to-node", "hipporag2-query-to-node", "hipporag2-no-passage-nodes", "hipporag1"]
    for method in ablations:
        assert ranking(method) != paper, method
    assert len({tuple(ranking(m)) for m in ablations}) == len(ablations)  # and from one another


def test_no_passage_nodes_uses_the_filter(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    from fake_openai import task_of

    fake_llm.handler = lambda request: '{"facts": []}' if task_of(request) == "filter" else None
    with build(tmp_path / "m", llm=fake_llm.chat()) as memory:
        r = memory.retrieve(Q_ACME, method="hipporag2-no-passage-nodes")[0]
        plain = memory.retrieve(Q_ACME, method="hipporag2-no-filter")[0]
    assert r.filtered and r.method == "dense" and not r.facts  # the filter kept nothing: dense ranking
    assert plain.method == "hipporag2-no-filter" and not plain.filtered
