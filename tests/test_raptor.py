"""The `raptor` peer method: its clustering on hand-made points with known structure (blobs, a point between two
blobs, oversized clusters, tiny inputs) and its collapsed-tree selection; end to end through the scripted
OpenAI-compatible server: added to an existing memory, kept in step by index and delete (only changed clusters
are summarised again), re-opened, estimated, and a malformed summary reply recorded and retried."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.retrieve.peers.raptor.cluster import Clustering, cluster_points, memberships, reduce, split_by_budget
from engram.retrieve.peers.raptor.prompts import SUMMARY_SYSTEM
from engram.retrieve.peers.raptor.query import expand, fill_budget
from fake_openai import FakeOpenAI, last_user_text, openie_answer, reply

TOPICS = {
    "volcano": "volcano lava eruption crater magma ash",
    "violin": "violin orchestra concerto bow strings music",
    "harbour": "harbour ships cargo port dock sailors",
}
NAMES = ["Aldo", "Berit", "Cyrus", "Dana", "Emil", "Farah", "Gustav", "Hanna", "Ivo", "Jana", "Kofi", "Lena"]


def topic_docs() -> list[Document]:
    return [
        Document(f"{topic}-{i}", f"{name} studied the {words} in part {i} of the {topic} survey.")
        for topic, words in TOPICS.items()
        for i, name in enumerate(NAMES)
    ]


def blobs(rng: np.random.Generator, sizes: list[int], dim: int = 32, spread: float = 0.05) -> np.ndarray:
    parts = []
    for axis, size in enumerate(sizes):
        centre = np.zeros(dim)
        centre[axis] = 1.0
        parts.append(centre + spread * rng.standard_normal((size, dim)))
    return np.vstack(parts)


def blob_of(i: int, sizes: list[int]) -> int:
    return int(np.searchsorted(np.cumsum(sizes), i, side="right"))


# clustering on hand-made points ----------------------------------------------------------------------------
def test_well_separated_blobs_are_recovered_and_clustering_is_deterministic() -> None:
    sizes = [15, 15, 15]
    points = blobs(np.random.default_rng(0), sizes)
    c = Clustering()
    # the global step (UMAP with sqrt(n) neighbours, then the mixture chosen by BIC) finds exactly the blobs
    found = memberships(reduce(points, int(math.sqrt(len(points) - 1)), c), c)
    assert found == [tuple(range(0, 15)), tuple(range(15, 30)), tuple(range(30, 45))]
    clusters = cluster_points(points, [10] * len(points), c)
    assert {i for cl in clusters for i in cl} == set(range(len(points)))  # every point is in a cluster
    assert all(len({blob_of(i, sizes) for i in cl}) == 1 for cl in clusters)  # no cluster mixes two blobs
    assert cluster_points(points, [10] * len(points), c) == clusters  # seeded: the same clusters again


def test_a_point_between_two_blobs_belongs_to_both() -> None:
    grid = np.linspace(-1.5, 1.5, 6)
    left = np.array([-2.5, 0.0]) + np.array([(a, b) for a in grid for b in grid[:5]])  # 30 points
    points = np.vstack([left, -left, [[0.0, 0.0]]])  # two mirrored blobs and their midpoint (row 60)
    two = Clustering(max_clusters=2)  # the component count fixed at two: this checks the soft membership
    assert memberships(points, two) == [(*range(0, 30), 60), (*range(30, 60), 60)]  # posterior ~1/2 each
    strict = memberships(points, Clustering(max_clusters=2, threshold=0.6))
    assert sorted(map(len, strict)) == [30, 31]  # above 0.6 it joins only its most probable component


def test_oversized_clusters_are_clustered_again_until_they_fit() -> None:
    sizes = [15, 15, 15]
    points = blobs(np.random.default_rng(0), sizes)
    whole = [tuple(range(0, 15)), tuple(range(15, 30)), tuple(range(30, 45))]
    assert cluster_points(points, [100] * 45, Clustering()) == whole  # 1,500 tokens each: within 3,500
    split = cluster_points(points, [100] * 45, Clustering(max_tokens=1000))
    assert len(split) > 3 and all(100 * len(cl) <= 1000 for cl in split)
    assert all(len({blob_of(i, sizes) for i in cl}) == 1 for cl in split)
    assert sorted(i for cl in split for i in cl) == list(range(45))
    # a node above the budget alone stays alone; the others are cut in order into runs that fit
    assert split_by_budget((3, 5, 7, 9), [0, 0, 0, 40, 0, 300, 0, 30, 0, 50], 100) == [(3,), (5,), (7, 9)]


def test_tiny_inputs_are_one_cluster() -> None:
    c = Clustering()
    assert cluster_points(np.zeros((0, 8)), [], c) == []
    assert cluster_points(np.ones((1, 8)), [5], c) == [(0,)]
    few = np.random.default_rng(3).standard_normal((11, 8))
    assert cluster_points(few, [5] * 11, c) == [tuple(range(11))]  # at most dim + 1 points: no UMAP
    assert memberships(np.ones((2, 3)), c) == [(0, 1)]


def test_groups_below_twice_dim_plus_one_are_one_cluster_without_fitting() -> None:
    from engram.retrieve.peers.raptor.cluster import one_component

    c = Clustering()
    rng = np.random.default_rng(5)
    for n in (12, 17, 21):  # what UMAP and the mixture give (one component), which cluster_points now skips
        points = np.vstack([rng.standard_normal((n // 2, 16)), 5 + rng.standard_normal((n - n // 2, 16))])
        assert one_component(n, c) and memberships(reduce(points, int(math.sqrt(n - 1)), c), c) == [tuple(range(n))]
        assert cluster_points(points, [5] * n, c) == [tuple(range(n))]
    assert not one_component(22, c)


def test_collapsed_tree_budget_and_passage_order() -> None:
    assert fill_budget([500, 800, 900, 10], 2000) == 2  # stops at the first node that does not fit
    assert fill_budget([], 2000) == 0
    # leaves 0..3; node 4 summarises leaves 1, 2, 3; node 5 summarises 0 and 3
    covers = [[0], [1], [2], [3], [1, 2, 3], [0, 3]]
    leaf_score = np.array([0.1, 0.5, 0.9, 0.3])
    assert expand([2, 4, 5], covers, leaf_score, 10) == [(2, 2), (1, 4), (3, 4), (0, 5)]
    assert expand([4, 2], covers, leaf_score, 2) == [(2, 4), (1, 4)]


# end to end through the scripted server ---------------------------------------------------------------------
def summary_of(user: str) -> str:
    found = [t for t, words in TOPICS.items() if words in user]
    texts = user.count("Text ")
    return json.dumps({"summary": f"A summary of {texts} texts about the {' and '.join(found)} survey."})


def handler(broken: str = "") -> Any:
    def handle(request: dict[str, Any]) -> Any:
        answer = openie_answer(request)
        if answer is not None:
            return reply(answer)
        if request["messages"][0]["content"] == SUMMARY_SYSTEM:
            user = last_user_text(request)
            if broken and (TOPICS[broken] in user or "could not be used" in user):
                return reply("not json at all")
            return reply(summary_of(user))
        return None

    return handle


def summary_requests(fake: FakeOpenAI) -> int:
    return sum(1 for r in fake.requests if r["messages"][0]["content"] == SUMMARY_SYSTEM)


def node_rows(memory: Memory) -> dict[str, str]:
    """Summary node id -> its leaves (JSON content hashes)."""
    tables = memory.context().tables
    assert tables is not None
    return {str(i): str(leaves) for i, leaves in tables.read("SELECT id, leaves FROM raptor_nodes")}


def open_memory(path: Path, fake: FakeOpenAI) -> Memory:
    return Memory(path, embedder=HashEmbedder(), llm=fake.chat())


def test_raptor_added_kept_in_step_and_reopened(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    docs = topic_docs()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(docs[:-1])  # harbour-11 comes later
        estimate = memory.estimate_method("raptor")
        assert estimate.passages == 35 and estimate.calls >= 1 and estimate.input_tokens > 0
        assert summary_requests(fake_llm) == 0  # estimating asks nothing
        done = memory.add_method("raptor")
        assert (done.extracted, done.failed) == (3, 0) and summary_requests(fake_llm) == 3
        assert done.stats == {"summaries": 3, "layers": 1, "failed": 0, "pending": 0}
        found = memory.retrieve("lava eruption of the volcano", top_k=5, method="raptor")[0]
        assert found.method == "raptor" and [p.id.split("-")[0] for p in found.passages] == ["volcano"] * 5
        notes = [p.metadata["raptor"] for p in found.passages]
        assert notes[0]["in_context"] and {n["layer"] for n in notes} <= {0, 1}
        broad = memory.retrieve("A summary of texts about the harbour survey", top_k=4, method="raptor")[0]
        via = broad.passages[0].metadata["raptor"]
        assert via["layer"] == 1 and "harbour" in via["summary"]  # the summary ranked first brings its passages
        assert {p.id.split("-")[0] for p in broad.passages} == {"harbour"}
        costs = memory.method_costs("raptor")
        assert costs["phases"]["index"]["calls"] == 3 and costs["phases"]["query"]["calls"] == 0
        assert costs["index"]["summaries"] == 3 and costs["disk_bytes"] > 0

        report = memory.index([docs[-1]])  # one harbour passage more: only the harbour cluster is asked again
        assert report.stats["raptor_extracted"] == 1 and summary_requests(fake_llm) == 4
        before = node_rows(memory)
        memory.delete(["volcano-2"])
        assert summary_requests(fake_llm) == 5  # fewer than the first build's 3: only the volcano cluster
        after_rows = node_rows(memory)
        assert len(set(before) & set(after_rows)) == 2  # the other clusters kept their nodes
        changed = [json.loads(leaves) for i, leaves in after_rows.items() if i not in before]
        assert len(changed) == 1 and "volcano-2" not in str(changed) and len(changed[0]) == 11
        after = memory.retrieve("Cyrus studied the volcano lava eruption crater magma ash in part 2", top_k=30,
                                method="raptor")[0]  # fmt: skip
        assert "volcano-2" not in [p.id for p in after.passages] and len(after.passages) == 30
        ids = [p.id for p in after.passages]
    with open_memory(tmp_path / "m", fake_llm) as memory:
        again = memory.retrieve("Cyrus studied the volcano lava eruption crater magma ash in part 2", top_k=30,
                                method="raptor")[0]  # fmt: skip
        assert [p.id for p in again.passages] == ids
        assert memory.method_costs("raptor")["index"]["summaries"] == 3
        memory.add_method("raptor")  # nothing changed: nothing is asked
    assert summary_requests(fake_llm) == 5


def test_a_malformed_summary_reply_is_recorded_and_retried(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler(broken="violin")
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(topic_docs())
        done = memory.add_method("raptor")  # the violin cluster's reply is unusable, even after the repair
        assert (done.extracted, done.failed) == (2, 1) and done.stats["summaries"] == 2
        found = memory.retrieve("violin concerto", top_k=3, method="raptor")[0]
        assert [p.id.split("-")[0] for p in found.passages] == ["violin"] * 3  # its leaves are still found
        fake_llm.handler = handler()
        before = summary_requests(fake_llm)
        again = memory.add_method("raptor")  # only the failed cluster is asked again
        assert (again.extracted, again.failed) == (1, 0) and summary_requests(fake_llm) == before + 1
        assert again.stats["summaries"] == 3


def test_writes_without_an_llm_drop_stale_summaries(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(topic_docs())
        memory.add_method("raptor")
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory:
        report = memory.delete(["violin-0"])  # the violin cluster's summary covered it: dropped, pending
        assert report.stats["raptor_pending"] == 1
        assert memory.method_costs("raptor")["index"]["summaries"] == 2
        found = memory.retrieve("violin orchestra", top_k=20, method="raptor")[0]  # no LLM needed to query
        assert "violin-0" not in [p.id for p in found.passages]
    calls = summary_requests(fake_llm)
    with open_memory(tmp_path / "m", fake_llm) as memory:
        done = memory.add_method("raptor")
        assert done.extracted == 1 and done.stats["summaries"] == 3 and summary_requests(fake_llm) == calls + 1


def test_the_estimate_follows_its_stated_assumption() -> None:
    from engram.retrieve.peers.raptor.method import METHOD
    from engram.store.rows import PassageRow

    rows = [PassageRow(f"p{i}", f"d{i}", None, "word " * 400, f"h{i}", {}) for i in range(40)]
    found = METHOD.estimate([*rows, rows[0]], None)  # the repeated content counts once
    # 40 leaves of ~500 tokens: 7 per 3,500-token cluster -> 6 clusters; 6 summaries are too few for a layer 2
    assert (found.passages, found.calls, found.cached_calls) == (40, 6, 0)
    assert found.input_tokens > 40 * 500
    assert METHOD.estimate(rows[:11], None).calls == 0  # at most dim + 1 leaves: no tree
    short = [PassageRow(f"p{i}", f"d{i}", None, "word " * 80, f"h{i}", {}) for i in range(100)]
    assert METHOD.estimate(short, None).calls == 10  # 100-token leaves: 11 per cluster (dim + 1) -> 10 clusters


@pytest.mark.parametrize("names", [("umap",), ("sklearn", "sklearn.mixture")])
def test_a_missing_extra_names_the_install(names: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from engram.errors import MissingDependencyError
    from engram.retrieve.peers.raptor.method import METHOD

    for name in names:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, as when it is not installed
    points = np.random.default_rng(4).standard_normal((30, 8))  # enough points to be reduced and fitted
    with pytest.raises(MissingDependencyError, match=r"pip install 'engram\[peers\]'"):
        cluster_points(points, [1] * 30, Clustering())
    with pytest.raises(MissingDependencyError, match=r"pip install 'engram\[peers\]'"):
        METHOD.ready()  # asked before the method's tables are made


def test_add_method_and_retrieve_on_the_command_line(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram.cli import main

    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)
    fake_llm.handler = handler()
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(topic_docs())
    common = ["--memory", str(tmp_path / "m"), "--embedder", "hash"]
    llm = ["--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model"]
    assert main(["add-method", "raptor", *common, *llm]) == 0
    added = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert added["index"]["summaries"] == 3 and added["costs"]["phases"]["index"]["calls"] == 3
    query = "A summary of texts about the violin survey"
    assert main(["retrieve", query, *common, "--method", "raptor", "--top-k", "3", "--json"]) == 0  # no LLM
    found = json.loads(capsys.readouterr().out)
    assert [p["metadata"]["raptor"]["layer"] for p in found["passages"]] == [1, 1, 1]
    assert "violin" in found["passages"][0]["metadata"]["raptor"]["summary"]
    calls = summary_requests(fake_llm)
    assert main(["add-method", "raptor", "--rebuild", *common, *llm]) == 0  # clustered again: the same 3 clusters
    rebuilt = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rebuilt["index"]["summaries"] == 3 and summary_requests(fake_llm) == calls  # stored nodes reused


# additions placed into the stored tree ---------------------------------------------------------------------
def test_new_nodes_join_the_nearest_centroid_whatever_their_order() -> None:
    from engram.retrieve.peers.raptor.place import place

    groups = [np.array([[1.0, 0.0], [0.9, 0.1]]), np.array([[0.0, 1.0], [0.1, 0.9]]), np.array([[-1.0, 0.0]])]
    fresh = np.array([[0.2, 1.0], [1.0, 0.3], [-1.0, -0.1], [0.0, 0.0]])
    assert place(groups, fresh) == [1, 0, 2, 0]  # a zero vector ties everywhere: the first group
    assert place(groups, fresh[::-1]) == [0, 2, 0, 1]  # each placed against the groups as they were
    assert place(groups, np.zeros((0, 2))) == []


def test_a_cluster_past_the_budget_is_split_alone() -> None:
    from engram.retrieve.peers.raptor.cluster import split_cluster

    points = blobs(np.random.default_rng(0), [15, 15])
    assert split_cluster(points, [100] * 30, Clustering()) == [tuple(range(30))]  # 3,000 tokens: fits, kept
    parts = split_cluster(points, [100] * 30, Clustering(max_tokens=2000))
    assert len(parts) >= 2 and all(100 * len(p) <= 2000 for p in parts)
    assert sorted(i for p in parts for i in p) == list(range(30))
    assert all(len({blob_of(i, [15, 15]) for i in p}) == 1 for p in parts)  # split along the blobs
    assert split_cluster(points[:1], [9000], Clustering()) == [(0,)]  # one node stays whole


def tree_rows(memory: Memory) -> dict[str, tuple[int, list[str]]]:
    """Summary node id -> (layer, leaves' content hashes)."""
    tables = memory.context().tables
    assert tables is not None
    return {str(i): (int(n), json.loads(lv)) for i, n, lv in tables.read("SELECT id, layer, leaves FROM raptor_nodes")}


def alive_hashes(memory: Memory) -> set[str]:
    view = memory.context().view
    return {p.content_hash for p, alive in zip(view.passages, view.passage_alive.tolist()) if alive}


def assert_valid_tree(memory: Memory) -> None:
    """Every alive passage is covered by a first-layer cluster and no summary covers a gone one."""
    rows, alive = tree_rows(memory), alive_hashes(memory)
    assert {h for layer, leaves in rows.values() if layer == 1 for h in leaves} == alive
    assert {h for _, leaves in rows.values() for h in leaves} <= alive


def small_raptor(monkeypatch: pytest.MonkeyPatch) -> None:
    """raptor with `dim` 2, so that the 36 topic passages make a tree of two summary layers."""
    from engram.retrieve.peers.raptor import method as raptor
    from engram.retrieve.peers.raptor.tree import Settings

    monkeypatch.setattr(raptor, "METHOD", raptor.Raptor(settings=Settings(clustering=Clustering(dim=2))))


def test_an_addition_asks_only_its_cluster_and_those_above(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_raptor(monkeypatch)
    fake_llm.handler = handler()
    docs = topic_docs()
    new = Document("violin-12", "Mira studied the violin orchestra concerto bow strings music in part 12.")
    with open_memory(tmp_path / "m", fake_llm) as memory:
        memory.index(docs)
        built = memory.add_method("raptor")
        before = tree_rows(memory)
        assert built.stats["layers"] >= 2 and built.extracted == len(before)
        asked = summary_requests(fake_llm)
        memory.index([new])
        sent = summary_requests(fake_llm) - asked
        after = tree_rows(memory)
        leaf = next(iter(alive_hashes(memory) - {h for _, lv in before.values() for h in lv}))
        made = {i for i in after if i not in before}
        # the asked nodes are exactly those above the new leaf: its first-layer cluster and its ancestors
        assert made == {i for i, (_, leaves) in after.items() if leaf in leaves}
        assert sent == len(made) < len(before) and len({after[i][0] for i in made}) >= 2
        assert sum(1 for i in made if after[i][0] == 1) == 1  # one first-layer cluster gained it
        assert len(set(before) & set(after)) == len(before) - len(made)  # every other node kept
        assert_valid_tree(memory)
        found = memory.retrieve("Mira studied the violin concerto in part 12", top_k=3, method="raptor")[0]
        assert found.passages[0].id == "violin-12"
        memory.delete(["volcano-3"])
        assert_valid_tree(memory)
        assert memory.add_method("raptor").extracted == 0  # in step: nothing to ask, nothing re-clustered
        incremental = tree_rows(memory)
        asked = summary_requests(fake_llm)
        again = memory.add_method("raptor", rebuild=True)  # every passage clustered again from scratch
        rebuilt = tree_rows(memory)
        assert again.extracted == summary_requests(fake_llm) - asked == len(set(rebuilt) - set(incremental))
        assert rebuilt != incremental  # here the writes' order left a tree that clustering from scratch changes
        assert_valid_tree(memory)
    with open_memory(tmp_path / "fresh", fake_llm) as memory:  # the same passages built at once
        memory.index([d for d in [*docs, new] if d.id != "volcano-3"])
        memory.add_method("raptor")
        assert tree_rows(memory) == rebuilt  # the rebuild is the tree a first build makes


def test_rebuild_is_refused_by_a_method_that_follows_every_write(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    from engram.errors import InputError

    with open_memory(tmp_path / "m", fake_llm) as memory, pytest.raises(InputError, match="no rebuild"):
        memory.add_method("lightrag", rebuild=True)
