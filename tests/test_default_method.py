"""The default method's later rules (engram.retrieve.default, engram.retrieve.named, engram.retrieve.links): only
the names the query writes as names are linked, dense retrieval's best passage stays first, fact seeds are weighed
by their gap to the best fact, and the names inside fact seeds' names are seeded too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.graph.certify import TopK
from engram.graph.ppr import solve_pagerank
from engram.retrieve.default import combined_seeds, dense_first, fact_weights
from engram.retrieve.links import inner_seeds, link_seeds, lookup_for
from engram.retrieve.named import named_only, written_as_names
from engram.retrieve.ranking import GraphRanking, SeedReset, kept_facts
from engram.retrieve.scoring import gap_weights, top_k
from helpers import DOCS, EXTRACTIONS

QUERIES = [
    "Who founded Acme Tools?",
    "Where was the founder of Acme Tools born?",
    "In which country is the birthplace of Alice Moreau?",
    "What river flows through the city where Alice Moreau was born?",
    "Who founded Zenith Foods?",
    "What is the capital of Norway?",
    "Where was Bob Stein born?",
]


def test_names_written_with_a_capital_or_a_digit_are_kept() -> None:
    query = "Which city hosted the 26th Chess Olympiad, and in what sport is Zoë Ruiz known?"
    names = ["city", "26th chess olympiad", "sport", "zoe ruiz", "chess"]
    assert named_only(query, names) == ["26th chess olympiad", "zoe ruiz", "chess"]
    assert written_as_names(query) is not None and "zoe" in (written_as_names(query) or set())


@pytest.mark.parametrize("query", ["which city hosted the chess olympiad", "WHICH CITY HOSTED THE CHESS OLYMPIAD"])
def test_a_query_in_one_case_keeps_every_name(query: str) -> None:
    assert written_as_names(query) is None
    assert named_only(query, ["city", "chess olympiad"]) == ["city", "chess olympiad"]


def _ranking(rows: list[int], scores: list[float], method: str = "hipporag2") -> GraphRanking:
    return GraphRanking(np.array(rows, dtype=np.int64), np.array(scores), method, [], [], [], False)


def test_dense_first_moves_or_inserts_the_best_passage_and_keeps_the_length() -> None:
    dense = np.array([0.1, 0.9, 0.2, 0.3, 0.4])
    tiebreak = np.arange(5)
    moved = dense_first(_ranking([3, 1, 2], [0.5, 0.3, 0.2]), dense, tiebreak)
    assert moved.rows.tolist() == [1, 3, 2] and moved.scores.tolist() == [0.5, 0.5, 0.2]
    inserted = dense_first(_ranking([3, 4, 2], [0.5, 0.3, 0.2]), dense, tiebreak)
    assert inserted.rows.tolist() == [1, 3, 4] and len(inserted.scores) == 3
    already = _ranking([1, 3], [0.5, 0.3])
    assert dense_first(already, dense, tiebreak) is already
    fallback = _ranking([4, 3], [0.4, 0.3], method="dense")
    assert dense_first(fallback, dense, tiebreak) is fallback


@pytest.fixture()
def memory(tmp_path: Path) -> Memory:
    docs = [*DOCS, Document("city", "A city is a large town.", title="City")]
    extractions = [*EXTRACTIONS, {"id": "city", "entities": ["city", "town"], "triples": [["city", "is a", "town"]]}]
    m = Memory(tmp_path / "m", embedder=HashEmbedder())
    m.index(docs, extractions=extractions)
    return m


def test_lower_case_words_are_not_linked(memory: Memory) -> None:
    with memory:
        view = memory.context().view
        query = "In which city was Alice Moreau born?"
        assert set(lookup_for(view).link(query)) == {"city", "alice moreau"}
        (rows, _), = link_seeds(view, [query], named_only)
        assert {view.tables.phrases[r] for r in rows.tolist()} == {"alice moreau"}
        seeds = {s.phrase for s in memory.retrieve(query, 3)[0].seeds}
        unnamed = {s.phrase for s in memory.retrieve(query, 3, config=replace(memory.config.retrieve,
                                                                               named_links=False))[0].seeds}
    assert "alice moreau" in seeds and "city" in unnamed and "city" not in seeds


def test_the_default_never_moves_dense_retrievals_best_passage(memory: Memory) -> None:
    with memory:
        # the graph alone would decide the order (with the paper's fact weights, under which it reorders here)
        weak = replace(memory.config.retrieve, prior_weight=1e-6, fact_temperature=None)
        dense = [r.passages[0].id for r in memory.retrieve(QUERIES, 3, "dense")]
        default = memory.retrieve(QUERIES, 3, config=weak)
        graph = memory.retrieve(QUERIES, 3, config=replace(weak, dense_first=False))
    assert all(r.method == "hipporag2" for r in default)
    assert [r.passages[0].id for r in default] == dense
    assert [r.passages[0].id for r in graph] != dense  # without the rule the graph reorders some
    for with_rule, without in zip(default, graph):  # after the first passage, the graph's order
        rest = [p.id for p in without.passages if p.id != with_rule.passages[0].id]
        assert [p.id for p in with_rule.passages[1:]] == rest[:2]


def test_fact_weights_fall_off_with_the_gap_to_the_best_fact() -> None:
    scores = np.array([0.60, 0.65, -0.2, 0.55, 0.1])  # every fact's score; rows 1, 0, 3 are the kept ones
    kept = np.array([1, 0, 3], dtype=np.int64)
    sharp = fact_weights(scores, kept, 0.02)  # one weight per kept row, in their order
    assert len(sharp) == 3 and sharp[0] == 1.0
    assert np.isclose(sharp[1], np.exp(-0.05 / 0.02)) and np.isclose(sharp[2], np.exp(-5.0))
    paper = fact_weights(scores, kept, None)  # min-max over every fact, as the paper
    assert np.allclose(paper, (scores[kept] + 0.2) / 0.85)
    assert len(fact_weights(scores, kept[:0], 0.02)) == 0
    assert gap_weights(np.array([-np.inf, 0.3, 0.5]), 0.1).tolist() == [0.0, np.exp(-2.0), 1.0]


def test_fact_seeds_weigh_each_fact_by_its_gap_to_the_best(memory: Memory) -> None:
    """The default's fact seeds, against a loop written from the rule: each phrase of a kept fact gets the mean
    of exp((score - best) / temperature) over its kept facts, over its passage count, times fact_seed_weight."""
    with memory:
        view = memory.context().view
        scores = view.fact_scores(memory.context().embed_queries(["Who founded Acme Tools?"]))[0]
        kept = top_k(scores, 3, view.fact_rank).tolist()
        config = memory.config.retrieve
        none: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0))
        for temperature in (0.02, 0.5, None):
            rule = replace(config, fact_temperature=temperature, inner_name_weight=0.0)
            rows, weights = combined_seeds(view, none, kept, scores, rule)
            sums: dict[int, list[float]] = {}
            for fact in kept:
                if temperature is None:
                    weight = (scores[fact] - scores.min()) / (scores.max() - scores.min())
                else:
                    weight = float(np.exp((scores[fact] - scores.max()) / temperature))
                for phrase in set(view.tables.fact_phrases[fact].tolist()):
                    sums.setdefault(phrase, []).append(weight)
            want = {
                p: config.fact_seed_weight * np.mean(w) / max(view.phrase_passage_counts[p], 1.0)
                for p, w in sums.items()
            }
            assert len(rows) == min(len(want), config.max_seeds)
            for row, weight in zip(rows.tolist(), weights.tolist()):
                assert np.isclose(weight, want[row])


def test_one_query_is_solved_from_its_reset_support_as_a_batch_solves_it(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone query's reset (one column) reaches PageRank as a vector with the nodes where it is not zero, so
    the solve reads those alone; its ranking and scores are a batch's (the same column among others)."""
    import engram.index.view.graph_index as view_module

    supports: list[object] = []
    solve = view_module.solve_pagerank

    def recording(*args: object, **kwargs: object) -> object:
        supports.append(kwargs.get("support"))
        return solve(*args, **kwargs)  # type: ignore[arg-type]

    with memory:
        batch = memory.retrieve(QUERIES, 5)
        monkeypatch.setattr(view_module, "solve_pagerank", recording)
        alone = [memory.retrieve([q], 5)[0] for q in QUERIES]
    graph = [i for i, r in enumerate(batch) if r.method == "hipporag2"]
    assert graph and len(supports) == len(graph)  # the dense fallbacks run no PageRank
    assert all(isinstance(s, np.ndarray) and len(s) for s in supports)
    for i in graph:
        assert [p.id for p in alone[i].passages] == [p.id for p in batch[i].passages]
        assert np.allclose([p.score for p in alone[i].passages], [p.score for p in batch[i].passages], rtol=1e-12)


@pytest.mark.parametrize("method", ["hipporag2", "hipporag2-paper"])
def test_a_batch_gives_each_query_what_it_gets_alone(memory: Memory, method: str) -> None:
    """Each query is solved on its own in a batch too (`rank_full_graph`): its passages and scores are the ones
    it gets alone, to the bit, in whatever batch and order it comes."""
    with memory:
        batch = memory.retrieve(QUERIES, 5, method=method)
        backwards = memory.retrieve(QUERIES[::-1], 5, method=method)[::-1]
        alone = [memory.retrieve([q], 5, method=method)[0] for q in QUERIES]
    assert sum(r.method == method for r in alone) >= 3  # most queries reach the graph
    for got in (batch, backwards):
        assert [r.method for r in got] == [r.method for r in alone]
        for one, among in zip(alone, got):
            assert [p.id for p in one.passages] == [p.id for p in among.passages]
            assert [p.score for p in one.passages] == [p.score for p in among.passages]


def test_a_large_batch_runs_in_slices_with_the_same_results(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose score rows would exceed `SLICE_BYTES` runs in slices of queries (here 2 a slice, 4
    slices for 7 queries): every method gives what the whole batch gives, in the queries' order."""
    import engram.retrieve.run as run

    with memory:
        methods = ("hipporag2", "hipporag2-paper", "dense", "bm25", "hybrid")
        whole = {m: memory.retrieve(QUERIES, 5, m) for m in methods}
        view = memory.context().view  # a slice's rows: one float64 per fact and two per passage (dense, BM25)
        monkeypatch.setattr(run, "SLICE_BYTES", 2 * 8 * (len(view.fact_alive) + 2 * len(view.passage_alive)) + 7)
        calls: list[int] = []
        real = run.retrieve

        def counting(ctx: object, queries: list[str], *args: object, **kwargs: object) -> object:
            calls.append(len(queries))
            return real(ctx, queries, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(run, "retrieve", counting)
        for method, expected in whole.items():
            calls.clear()
            sliced = memory.retrieve(QUERIES, 5, method)
            assert calls == [2, 2, 2, 1]  # the slices (Memory calls the outer one by its own name)
            assert [r.query for r in sliced] == QUERIES
            assert [[(p.id, p.score) for p in r.passages] for r in sliced] == [
                [(p.id, p.score) for p in r.passages] for r in expected
            ]


def test_the_names_inside_a_fact_seeds_name_are_seeded(tmp_path: Path) -> None:
    """"west chicago high school" (a fact seed) holds the phrase node "west chicago": seeded at
    inner_name_weight x the parent's weight x its specificity (the idf of its rarest word over the passages,
    counted here by hand) over its passage count; none at weight 0, and the paper's method is unchanged."""
    docs = [
        *DOCS,
        Document("fawell", "Harris Fawell is a graduate of West Chicago High School.", title="Harris Fawell"),
        Document("west", "West Chicago is a city in DuPage County, Illinois.", title="West Chicago"),
        Document("fire", "The Chicago Fire of 1871 burned the city.", title="Chicago Fire"),
    ]
    extractions = [
        *EXTRACTIONS,
        {"id": "fawell", "triples": [["harris fawell", "is a graduate of", "west chicago high school"]]},
        {"id": "west", "triples": [["west chicago", "is in", "dupage county"], ["west chicago", "in", "illinois"]]},
        {"id": "fire", "triples": [["chicago fire", "happened in", "1871"], ["chicago fire", "burned", "chicago"]]},
    ]
    query = "In what county is the school Harris Fawell graduated from?"
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index(docs, extractions=extractions)
        view = memory.context().view
        lookup = lookup_for(view)
        assert lookup.inside("west chicago high school") == ["west chicago"]  # longest first, consumed
        assert lookup.inside("west chicago") == lookup.inside("chicago fire") == ["chicago"]
        assert lookup.inside("chicago") == [] and lookup.inside("harris fawell") == []  # never the name itself
        config = memory.config.retrieve
        seeds = {}
        for w in (config.inner_name_weight, 0.0):
            found = memory.retrieve(query, 5, config=replace(config, inner_name_weight=w))[0]
            seeds[w] = {s.phrase: s.weight for s in found.seeds}
        paper = [memory.retrieve(query, 5, "hipporag2-paper", config=replace(config, inner_name_weight=w))[0]
                 for w in (0.15, 0.0)]
        row = view.tables.phrases.index("west chicago high school")
        (inner_rows, inner_weights) = inner_seeds(view, np.array([row], dtype=np.int64), np.array([0.5]))
    passages = len(docs)  # "west" is in two passages' phrases (fawell's, west's), "chicago" in three
    specificity = np.log((passages + 1) / 3) / np.log(passages + 1)
    assert config.inner_name_weight > 0 and seeds[config.inner_name_weight]["west chicago high school"] == 0.5
    added = seeds[config.inner_name_weight]["west chicago"] - seeds[0.0].get("west chicago", 0.0)
    assert np.isclose(added, config.inner_name_weight * 0.5 * specificity)  # one passage holds "west chicago"
    assert [view.tables.phrases[r] for r in inner_rows.tolist()] == ["west chicago"]
    assert np.isclose(float(inner_weights[0]), 0.5 * specificity)
    assert [p.id for p in paper[0].passages] == [p.id for p in paper[1].passages]
    assert [s.weight for s in paper[0].seeds] == [s.weight for s in paper[1].seeds]


def test_the_candidate_facts_are_the_best_alive_ones(memory: Memory) -> None:
    """The top facts a query's seeds start from, against a sort of the alive facts by score, then canonical
    order: whether or not a dead fact scores best (the fallback from the best of every row to the alive ones)."""
    with memory:
        memory.delete(["acme"])  # its facts die, their rows stay
        view = memory.context().view
        alive, dead = np.flatnonzero(view.fact_alive), np.flatnonzero(~view.fact_alive)
        assert len(dead) and len(alive) > 4
        rng = np.random.default_rng(7)
        for trial in range(40):
            scores = rng.integers(0, 4, len(view.fact_alive)).astype(np.float64)  # many ties
            if trial % 2:
                scores[rng.choice(dead)] = 9.0  # a dead fact scores above every alive one
            for k in (1, 3, len(alive) + 2):
                _, _, rows, _ = kept_facts(view, "q", scores, memory.config.retrieve, None, k)
                want = sorted(alive.tolist(), key=lambda r: (-scores[r], int(view.fact_rank[r])))[:k]
                assert rows == want


def test_a_reset_by_its_parts_gives_the_masses_of_the_whole_vector(memory: Memory) -> None:
    """`GraphIndex.seeded_ppr` (phrase seeds and passage weights, no vector over every row) against
    `passage_ppr` of the same reset written out, to the bit, and against PageRank of that vector put in canonical
    order by hand (`node_rows` holds the alive nodes: dead phrases drop out); seeds on dead phrases and zero
    weights included."""
    with memory:
        memory.delete(["acme"])
        view = memory.context().view
        rng = np.random.default_rng(3)
        dead = np.flatnonzero(~view.phrase_alive)
        assert len(dead)
        for trial in range(10):
            rows = rng.choice(view.n_phrases, 4, replace=False)
            rows[0] = rng.choice(dead)
            weights = rng.random(4) * (np.arange(4) != trial % 4)  # one seed of weight 0
            passages = rng.random(len(view.passages))
            reset = SeedReset(rows.astype(np.int64), weights, passages).dense(view.n_phrases)
            whole = view.passage_ppr(reset, 0.5, top=3)
            parts = view.seeded_ppr(rows.astype(np.int64), weights, passages, 0.5, 3)
            assert parts.tobytes() == whole.tobytes()
            start = int(np.count_nonzero(view.node_rows < view.n_phrases))
            solved = solve_pagerank(view.walk, reset[view.node_rows], 0.5, top=TopK(start, 3))
            by_hand = np.zeros(len(view.passages))
            by_hand[view.node_rows[start:] - view.n_phrases] = solved[start:]
            assert np.allclose(parts, by_hand, rtol=1e-9, atol=0.0)
            assert top_k(parts, 3).tolist() == top_k(by_hand, 3).tolist()
