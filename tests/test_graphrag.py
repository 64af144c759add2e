"""The `graphrag-local` peer method: hierarchical Leiden on hand-made graphs with known structure, the local
search context and its token budget on hand-made inputs, and end to end through the scripted OpenAI-compatible
server (replies per prompt kind: extraction, gleaning, summary, report): added to an existing memory, retrieved,
kept in step by index and delete, re-opened, estimated; malformed replies never crash."""

from __future__ import annotations

import json
import random
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.retrieve.peers.graphrag.context import Budget, CommunityReport, Picked, Rel, build_context, fit
from engram.retrieve.peers.graphrag.leiden import Edge, hierarchical_leiden, leaves_by_node
from engram.retrieve.peers.graphrag.prompts import EXTRACT_SYSTEM, GLEAN_REQUEST, REPORT_SYSTEM, SUMMARY_SYSTEM
from fake_openai import FakeOpenAI, last_user_text, reply
from helpers import DOCS, EXTRACTIONS

EXTRA = [{"id": "bergen", "entities": ["Bergen", "Norway"], "triples": [["Bergen", "city in", "Norway"]]}]
BERGEN = Document("bergen", "Bergen is a city in Norway.")
BY_TEXT = {d.text: e for d, e in zip([*DOCS, BERGEN], [*EXTRACTIONS, *EXTRA])}


def clique(prefix: str, size: int, weight: float = 1.0) -> tuple[list[str], list[Edge]]:
    nodes = [f"{prefix}{i}" for i in range(size)]
    return nodes, [(a, b, weight) for a, b in combinations(nodes, 2)]


def test_two_cliques_joined_by_a_bridge_and_an_isolated_node() -> None:
    a, edges_a = clique("a", 5, 5.0)
    b, edges_b = clique("b", 5, 5.0)
    found = hierarchical_leiden([*b, "lonely", *a], [*edges_b, ("a0", "b0", 1.0), *edges_a, ("lonely", "lonely", 3.0)])
    assert [(c.level, c.id, c.parent, c.members) for c in found] == [
        (0, 0, -1, tuple(a)),
        (0, 1, -1, tuple(b)),
        (0, 2, -1, ("lonely",)),
    ]
    assert hierarchical_leiden([], []) == []


def groups_of_cliques() -> tuple[list[str], list[Edge], list[list[str]]]:
    """Four groups of three 4-cliques (12 nodes, above the maximum size 10); the cliques of a group are tied
    by lighter edges, the groups by one light edge in a chain."""
    nodes: list[str] = []
    edges: list[Edge] = []
    cliques: list[list[str]] = []
    for g in range(4):
        group = []
        for c in range(3):
            members, inside = clique(f"g{g}c{c}_", 4)
            nodes, edges, group = [*nodes, *members], [*edges, *inside], [*group, members]
        cliques += group
        edges += [(group[x][i], group[y][i], 0.5) for x, y in combinations(range(3), 2) for i in range(4)]
    edges += [(f"g{g}c0_0", f"g{g + 1}c0_0", 0.1) for g in range(3)]
    return nodes, edges, cliques


def test_a_clique_of_cliques_larger_than_the_maximum_nests_a_level() -> None:
    nodes, edges, cliques = groups_of_cliques()
    found = hierarchical_leiden(nodes, edges, max_size=10)
    top = [c for c in found if c.level == 0]
    assert [set(c.members) for c in top] == [{n for n in nodes if n.startswith(f"g{g}")} for g in range(4)]
    nested = [c for c in found if c.level == 1]
    assert sorted(c.members for c in nested) == sorted(tuple(c) for c in cliques)
    for c in nested:  # each clique's parent is its group
        assert c.members[0][:2] == found[c.parent].members[0][:2] and found[c.parent].level == 0
    assert max(c.level for c in found) == 1
    leaves = leaves_by_node(found, max_level=2)
    assert all(leaves[n].level == 1 for n in nodes) and all(leaves_by_node(found, 0)[n].level == 0 for n in nodes)
    # deterministic and independent of the input order
    shuffled_nodes, shuffled_edges = list(nodes), [(b, a, w) for a, b, w in edges]
    random.Random(7).shuffle(shuffled_nodes)
    random.Random(8).shuffle(shuffled_edges)
    assert hierarchical_leiden(shuffled_nodes, shuffled_edges, max_size=10) == found
    assert all(c.level == 0 for c in hierarchical_leiden(nodes, edges, max_size=12))  # no group above 12


def test_an_unsplittable_community_stays_whole() -> None:
    nodes, edges = clique("k", 12)
    found = hierarchical_leiden(nodes, edges, max_size=10)
    assert [(c.level, len(c.members)) for c in found] == [(0, 12)]


def count_words(text: str) -> int:
    return len(text.split())


def picked(key: str, sources: tuple[str, ...], score: float) -> Picked:
    return Picked(key, key.title(), f"about {key}", 1, sources, score)


def test_context_ranks_reports_units_and_relationships() -> None:
    chosen = [picked("a", ("u2", "u1"), 0.9), picked("b", ("u3", "u1"), 0.8), picked("c", ("u4",), 0.7)]
    ab = Rel("a", "b", "a knows b", 2.0, ("u1",))
    ax = Rel("a", "x", "a met x", 9.0, ("u1", "u2"))
    bx = Rel("b", "x", "b met x", 1.0, ("u3",))
    cy = Rel("c", "y", "c met y", 5.0, ("u4",))
    links = {"a": [ab, ax], "b": [ab, bx], "c": [cy], "x": [ax, bx], "y": [cy]}
    names = {k: k.title() for k in "abcxy"}
    community_of = {"a": 1, "b": 2, "c": 2, "x": 1}
    reports = {1: CommunityReport(1, 9.0, "report one"), 2: CommunityReport(2, 1.0, "report two")}
    units = {u: f"text of {u}" for u in ("u1", "u2", "u3", "u4")}
    ctx = build_context(chosen, links, names, (community_of, reports), units, count_words)
    assert ctx.reports == [2, 1]  # two selected entities in community 2, one in community 1 (rated higher)
    assert ctx.entities == ["a", "b", "c"]
    # a-b among selected entities first; then x (linked to two selected entities) before y, each by strength
    assert ctx.relationships == [ab, ax, bx, cy]
    # a's units first, u1 (supports two of a's relationships) before u2; then b's u3; then c's u4
    assert ctx.units == ["u1", "u2", "u3", "u4"]
    # 40 words: 6 for reports (one fits), 24 for entities and relationships (a and b with theirs: exactly 24;
    # adding c would take 31), 10 for units (two fit)
    small = build_context(chosen, links, names, (community_of, reports), units, count_words, Budget(40, 0.25, 0.15))
    assert (small.reports, small.entities, small.relationships, small.units) == ([2], ["a", "b"], [ab, ax, bx],
                                                                                  ["u1", "u2"])  # fmt: skip
    assert small.tokens == {"reports": 5, "local": 24, "units": 10}


def test_fit_stops_at_the_first_row_that_does_not_fit() -> None:
    assert fit("h", ["one two", "one two three four", "x"], count_words, 5) == (1, 4)
    assert fit("a header too long", ["x"], count_words, 3) == (0, 0)
    assert Budget().shares() == (1200, 4800, 6000)


def graph_reply(extraction: dict[str, Any]) -> str:
    entities = [
        {"name": n, "type": "person", "description": f"{n} as {extraction['id']} tells"} for n in extraction["entities"]
    ]
    relationships = [
        {"source": s, "target": o, "description": f"{s} {r} {o}", "strength": 8} for s, r, o in extraction["triples"]
    ]
    return json.dumps({"entities": entities, "relationships": relationships})


def report_reply(user: str) -> str:
    names = [line.split("|")[1] for line in user.split("\n\nRelationships")[0].splitlines()[2:]]
    findings = [{"summary": names[0], "explanation": "first"}]
    about = f"About {', '.join(names)}."
    report = {"title": " and ".join(names), "summary": about, "rating": len(names), "rating_explanation": "size"}
    return json.dumps({**report, "findings": findings})


def handler(broken: str = "", bad_reports: bool = False) -> Any:
    def handle(request: dict[str, Any]) -> Any:
        system, user = request["messages"][0]["content"], last_user_text(request)
        if system == EXTRACT_SYSTEM and user == GLEAN_REQUEST:
            return reply(json.dumps({"entities": [], "relationships": []}))
        if system == EXTRACT_SYSTEM:
            found = [e for text, e in BY_TEXT.items() if text in user]
            return reply("[not json" if not found or found[0]["id"] == broken else graph_reply(found[0]))
        if system == SUMMARY_SYSTEM:
            return reply(json.dumps({"description": "merged: " + user.splitlines()[0]}))
        if system == REPORT_SYSTEM:
            return reply("Here is the report you asked for." if bad_reports else report_reply(user))
        return None

    return handle


def open_memory(path: Path, fake: FakeOpenAI) -> Memory:
    return Memory(path, embedder=HashEmbedder(), llm=fake.chat())


def kinds(fake: FakeOpenAI, start: int = 0) -> dict[str, int]:
    out: dict[str, int] = {}
    for request in fake.requests[start:]:
        system, user = request["messages"][0]["content"], last_user_text(request)
        kind = {EXTRACT_SYSTEM: "extract", SUMMARY_SYSTEM: "summary", REPORT_SYSTEM: "report"}[system]
        kind = "glean" if user == GLEAN_REQUEST else kind
        out[kind] = out.get(kind, 0) + 1
    return out


def test_graphrag_local_added_kept_in_step_and_reopened(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)  # imported: no LLM call
        before = memory.estimate_method("graphrag-local")
        # 5 extractions + 5 gleanings; assumed: 25 entities, 5 summaries (20%), 2 reports (25 / 10)
        assert (before.method, before.passages, before.calls, before.cached_calls) == ("graphrag-local", 5, 17, 0)
        done = memory.add_method("graphrag-local")
        assert (done.extracted, done.failed) == (5, 0)
        built = kinds(fake_llm)
        # Alice Moreau, Lyon and Oslo are described by two units each: three summaries
        assert built["extract"] == 5 and built["glean"] == 5 and built["summary"] == 3
        assert built["report"] == done.stats["reports"] > 0 and done.stats["failed_reports"] == 0
        assert done.stats["entities"] == 10 and done.stats["relationships"] == 8
        after = memory.estimate_method("graphrag-local")  # replayed from the cache: every request is cached
        assert (after.calls, after.input_tokens, after.cached_calls) == (0, 0, fake_llm.attempts)

        calls = fake_llm.attempts
        found = memory.retrieve("Oslo capital of Norway", top_k=3, method="graphrag-local")[0]
        assert fake_llm.attempts == calls  # local search asks the LLM nothing
        assert found.method == "graphrag-local" and "oslo" in [p.id for p in found.passages]
        assert any(f.subject == "Oslo" and f.object == "Norway" for f in found.facts)
        assert found.seeds and found.seeds[0].weight >= found.seeds[-1].weight

        memory.index([BERGEN], extractions=EXTRA)
        grown = kinds(fake_llm, calls)
        assert grown["extract"] == 1 and grown.get("summary") == 1  # Norway now has two descriptions
        mark = fake_llm.attempts
        memory.delete(["oslo", "bob"])
        spent = kinds(fake_llm, mark)
        assert "extract" not in spent and sum(spent.values()) < sum(built.values())
        stats = memory.method_costs("graphrag-local")["index"]
        assert stats["chunks"] == 4 and stats["failed_reports"] == 0
        gone = memory.retrieve("Oslo capital of Norway", top_k=10, method="graphrag-local")[0]
        assert not {"oslo", "bob"} & {p.id for p in gone.passages}
        assert "bergen" in [p.id for p in gone.passages]
        costs = memory.method_costs("graphrag-local")
        assert costs["phases"]["index"]["calls"] == fake_llm.attempts and costs["disk_bytes"] > 0
    with open_memory(tmp_path / "m", fake_llm) as memory:
        again = memory.retrieve("Oslo capital of Norway", top_k=10, method="graphrag-local")[0]
        assert [p.id for p in again.passages] == [p.id for p in gone.passages]
        assert memory.method_costs("graphrag-local")["index"]["entities"] == stats["entities"]


def test_malformed_replies_are_recorded_and_retried(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler(broken="lyon", bad_reports=True)
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        done = memory.add_method("graphrag-local")
        assert (done.extracted, done.failed) == (4, 1)
        assert done.stats["reports"] == 0 and done.stats["failed_reports"] > 0
        found = memory.retrieve("Who founded Acme Tools?", top_k=2, method="graphrag-local")[0]
        assert found.passages  # no report, the rest of the context still works
        fake_llm.handler = handler()
        again = memory.add_method("graphrag-local")  # the failed unit and the failed reports only
        assert (again.extracted, again.failed) == (1, 0)
        assert again.stats["failed_reports"] == 0 and again.stats["reports"] > 0


def test_deletes_without_an_llm_leave_reports_to_retry(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        memory.add_method("graphrag-local")
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        memory.delete(["alice"])  # followed without an LLM; changed communities wait for their report
        assert memory.method_costs("graphrag-local")["index"]["chunks"] == 4
        found = memory.retrieve("Lyon France", top_k=5, method="graphrag-local")[0]  # no LLM needed
        assert "alice" not in [p.id for p in found.passages] and found.passages
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.add_method("graphrag-local")
        assert memory.method_costs("graphrag-local")["index"]["failed_reports"] == 0


def test_unknown_shape_of_reply_never_crashes(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    def junk(request: dict[str, Any]) -> Any:
        return reply(json.dumps({"entities": "none", "relationships": {"a": 1}}))

    fake_llm.handler = junk
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS[:2], extractions=EXTRACTIONS)
        done = memory.add_method("graphrag-local")
        assert (done.extracted, done.failed, done.stats["entities"]) == (0, 2, 0)
        assert memory.retrieve("anything", top_k=3, method="graphrag-local")[0].passages == []


@pytest.mark.parametrize("entities", [[{"name": "", "type": 1}, {"type": "person"}, "x", {"name": "Ok"}]])
def test_items_without_a_name_are_dropped(entities: list[Any]) -> None:
    from engram.retrieve.peers.graphrag.prompts import read_extraction, read_report

    graph = read_extraction({"entities": entities, "relationships": [{"source": "Ok"}, {"source": "Ok", "target": "B",
                             "strength": "high"}]})  # fmt: skip
    assert [e.name for e in graph.entities] == ["Ok"] and graph.entities[0].type == "other"
    assert [(r.source, r.target, r.strength) for r in graph.relations] == [("Ok", "B", 1.0)]
    report = read_report({"title": "T", "summary": "S", "rating": "11", "findings": ["plain", {"summary": "x"}, 3]})
    assert (report.rating, report.findings) == (10.0, (("plain", ""), ("x", "")))


def test_command_line_dry_run_add_method_and_retrieve(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram.cli import main
    from test_eval_report import write_data

    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)
    fake_llm.handler = handler()
    llm = ["--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model"]
    data = write_data(tmp_path)
    corpus, memory = data[data.index("--corpus") + 1], str(tmp_path / "m")
    no_extractions = data[: data.index("--extractions")] + data[data.index("--extractions") + 2 :]
    assert main(["eval", *no_extractions, "--methods", "graphrag-local", "--dry-run", *llm]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| graphrag-local")]
    assert [c.strip() for c in rows[0][2:3]] == ["5"] and int(rows[0][3]) > 10 and fake_llm.attempts == 0
    extractions = data[data.index("--extractions") + 1]
    assert main(["index", corpus, "--memory", memory, "--extractions", extractions, "--embedder", "hash"]) == 0
    assert main(["add-method", "graphrag-local", "--memory", memory, "--embedder", "hash", *llm]) == 0
    added = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert added["index"]["reports"] > 0 and added["costs"]["phases"]["index"]["calls"] == fake_llm.attempts
    query = ["retrieve", "capital of Norway", "--memory", memory, "--embedder", "hash", "--method", "graphrag-local"]
    assert main([*query, "--json"]) == 0  # no LLM needed to search
    assert "oslo" in capsys.readouterr().out


def test_eval_with_qa_beside_dense(tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    from engram.cli import main
    from fake_openai import task_of
    from test_eval_report import write_data

    inner = handler()
    fake_llm.handler = lambda request: "Answer: Oslo" if task_of(request) == "reader" else inner(request)
    args = ["eval", *write_data(tmp_path), "--methods", "graphrag-local,dense", "--qa", "--json", "--llm-base-url",
            fake_llm.base_url, "--llm-model", "fake-model", "--bootstrap-samples", "100"]  # fmt: skip
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)["methods"]
    graph, dense = rows["graphrag-local"], rows["dense"]
    assert graph["recall"]["5"] > 0 and graph["cost"]["index_input_tokens"] > 0
    assert graph["em"] == dense["em"] and graph["cost"]["query_tokens"] > 0  # the reader's tokens


def test_report_request_ranks_rows_and_keeps_to_its_budget() -> None:
    from engram.retrieve.peers.graphrag.graph import Graph, Link, Node, community_request, links_by_node
    from engram.retrieve.peers.graphrag.leiden import Community

    nodes = [Node("a", "A", "person", "hub", ("u",), 3), Node("b", "B", "geo", "leaf | b", ("u",), 1),
             Node("c", "C", "geo", "leaf c", ("u",), 2), Node("d", "D", "geo", "outside", ("u",), 1)]  # fmt: skip
    links = [Link("a", "b", "a-b", 1.0, ("u",)), Link("a", "c", "a-c", 1.0, ("u",)),
             Link("a", "d", "a-d", 1.0, ("u",)), Link("b", "c", "b-c", 1.0, ("u",))]  # fmt: skip
    graph_links = links_by_node(Graph(nodes, links))
    by_key = {n.key: n for n in nodes}
    community = Community(0, 0, -1, ("a", "b", "c"))
    full = community_request(community, by_key, graph_links, count_words, 10_000)[-1]["content"]
    # entities by degree; relationships among members only (not a-d), by their ends' summed degree
    assert full.splitlines()[2:5] == ["0|A|hub|3", "1|C|leaf c|2", "2|B|leaf / b|1"]
    assert full.split("Relationships\n")[1].splitlines()[1:] == ["0|A|C|a-c|5", "1|A|B|a-b|4", "2|B|C|b-c|3"]
    cuts = [community_request(community, by_key, graph_links, count_words, b)[-1]["content"] for b in range(400)]
    for cut in cuts:  # rows kept in the full request's order
        assert [r for r in full.splitlines() if r in cut.splitlines()] == cut.splitlines()
        assert "Relationships" not in cut or "2|B|leaf / b|1" in cut  # a relationship only after every entity
    assert any(cut.endswith("1|A|B|a-b|4") for cut in cuts) and any(cut.endswith("1|C|leaf c|2") for cut in cuts)


def test_without_the_peers_extra_the_error_names_it_before_any_call(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram.errors import InputError

    fake_llm.handler = handler()
    monkeypatch.setitem(sys.modules, "leidenalg", None)  # import leidenalg -> ImportError
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
        with pytest.raises(InputError, match=r"pip install 'engram\[peers\]'"):
            memory.add_method("graphrag-local")
        memory.index([BERGEN], extractions=EXTRA)  # the memory holds no half-added method
        assert "graphrag-local_extracted" not in memory.index([BERGEN], extractions=EXTRA).stats
    assert fake_llm.attempts == 0
