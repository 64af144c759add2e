"""The graph neighbourhood (engram.graph.neighbourhood) on hand-made arrays: hops, limits, kinds, dead nodes."""

from __future__ import annotations

import numpy as np

from engram.graph.neighbourhood import EdgeTables, Neighbourhood, neighbourhood

PHRASES = ["a", "b", "c", "d"]  # nodes 0..3
PASSAGES = [("p0", "Passage zero"), ("p1", "p1")]  # nodes 4, 5


def tables() -> EdgeTables:
    """a-b (relation 2), b-c (relation 1), c-d (synonym 0.9); p0 states a and b, p1 states d."""
    return EdgeTables.from_graph(
        n_phrases=4,
        relation=np.array([[0, 1], [1, 2]], dtype=np.int64),
        relation_weight=np.array([2.0, 1.0]),
        synonyms=(np.array([[2, 3]], dtype=np.int64), np.array([0.9])),
        context=np.array([[0, 0], [0, 1], [1, 3]], dtype=np.int64),
        context_weight=0.5,
    )


def ids(found: Neighbourhood) -> list[str]:
    return [n.id for n in found.nodes]


def test_hops_kinds_and_labels() -> None:
    alive = np.ones(6, dtype=bool)
    one = neighbourhood(tables(), PHRASES, PASSAGES, alive, [0], hops=1, limit=10)
    assert ids(one) == ["phrase:a", "phrase:b", "passage:p0"]  # heaviest edge first: relation 2 > context 0.5
    assert {(e.source, e.target, e.kind, e.weight) for e in one.edges} == {
        ("phrase:a", "phrase:b", "relation", 2.0),
        ("phrase:a", "passage:p0", "context", 0.5),
        ("phrase:b", "passage:p0", "context", 0.5),
    }
    assert [n.start for n in one.nodes] == [True, False, False] and not one.truncated
    assert one.nodes[2].label == "Passage zero"
    two = neighbourhood(tables(), PHRASES, PASSAGES, alive, [0], hops=2, limit=10)
    assert ids(two)[3:] == ["phrase:c"]
    assert "phrase:d" not in ids(two)  # three hops away


def test_limit_truncates_and_dead_nodes_are_left_out() -> None:
    alive = np.ones(6, dtype=bool)
    small = neighbourhood(tables(), PHRASES, PASSAGES, alive, [3], hops=2, limit=2)
    assert ids(small) == ["phrase:d", "phrase:c"] and small.truncated
    alive[2] = False  # phrase c died (its passages were deleted)
    cut = neighbourhood(tables(), PHRASES, PASSAGES, alive, [3], hops=2, limit=10)
    assert ids(cut) == ["phrase:d", "passage:p1"]
    assert all("phrase:c" not in (e.source, e.target) for e in cut.edges)
    assert neighbourhood(tables(), PHRASES, PASSAGES, alive, [2], hops=1, limit=10).nodes == []


def test_a_cut_short_picture_keeps_what_joins_the_starts_and_a_neighbour_of_each() -> None:
    """Phrase 0 (a seed) has heavy edges to phrases 1-6; phrase 7 (another seed) only a light one to phrase 8;
    passage node 10 (a retrieved passage) states phrase 9, which phrase 0 reaches by a light relation. With
    room for three more nodes, the heaviest-first order took 1, 2, 3; the picture keeps 9, which joins seed
    and passage, and 8, the only neighbour of seed 7."""
    relation = np.array([[0, k] for k in range(1, 7)] + [[7, 8], [0, 9]], dtype=np.int64)
    weight = np.array([5.0] * 6 + [0.3, 0.2])
    edges = EdgeTables.from_graph(
        n_phrases=10,
        relation=relation,
        relation_weight=weight,
        synonyms=(np.zeros((0, 2), dtype=np.int64), np.zeros(0)),
        context=np.array([[0, 9]], dtype=np.int64),  # passage row 0 (node 10) states phrase 9
        context_weight=0.1,
    )
    phrases = [f"x{i}" for i in range(10)]
    found = neighbourhood(edges, phrases, [("p", "p")], np.ones(11, dtype=bool), [0, 7, 10], hops=1, limit=6)
    assert ids(found)[:3] == ["phrase:x0", "phrase:x7", "passage:p"]
    assert ids(found)[3] == "phrase:x9"  # joins seed x0 and the passage
    assert set(ids(found)[4:]) == {"phrase:x8", "phrase:x1"}  # each seed keeps its heaviest neighbour
    assert found.truncated
    touched = {end for e in found.edges for end in (e.source, e.target)}
    assert {"phrase:x0", "phrase:x7", "passage:p"} <= touched  # no start is drawn alone
