"""RAPTOR's tree over a memory, kept in step with its alive passages. The leaves are the passages themselves
(each content once, with the memory's passage vectors; they are not copied into RAPTOR's tables); the summary
nodes live in `raptor_nodes`: layer, text, vector, children and the leaf passages each covers.

`sync` brings the tree in step whenever the alive leaves changed (or when the last build missed a summary and
an LLM is here to retry it), keeping the stored clusters (`update`): a deleted leaf leaves its clusters, a new
leaf joins the first-layer cluster whose centroid is nearest (`raptor.place`), a cluster that grew past the
token budget is clustered again on its own, and only the clusters that changed and those above them are
summarised again. A first build, new settings or an explicit rebuild cluster every leaf (`grow`): cluster the
layer's nodes (`raptor.cluster`), summarise each cluster, embed the summaries, and repeat on the summaries. A
node's id is the hash of its summary request (the texts of its children in id order), and a stored node with
that id is reused without asking. A summary request that fails is recorded in `raptor_failed` and asked again
by the next sync (its node then joins the layer above like a new leaf); the tree is built from the summaries
that exist."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from engram.llm.json_reply import JsonRequest
from engram.retrieve.peers.base import PeerHost, PeerSync, passages_of
from engram.retrieve.peers.graphrag.index import ask_all
from engram.retrieve.peers.lightrag.prompts import passage_block
from engram.retrieve.peers.lightrag.rows import digest_of, text_hash, vectors_for
from engram.retrieve.peers.raptor.cluster import Clustering, cluster_points, split_cluster
from engram.retrieve.peers.raptor.place import place
from engram.retrieve.peers.raptor.prompts import SUMMARY_SYSTEM, read_summary, summary_messages
from engram.store.peer_tables import PeerTables
from engram.tokens import default_counter

SCHEMA = """
CREATE TABLE IF NOT EXISTS raptor_nodes (
    id TEXT PRIMARY KEY, layer INTEGER NOT NULL, text TEXT NOT NULL, children TEXT NOT NULL,
    leaves TEXT NOT NULL, vector BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS raptor_failed (
    id TEXT PRIMARY KEY, layer INTEGER NOT NULL, children TEXT NOT NULL, error TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS raptor_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
METHOD = "raptor"
SUMMARY = JsonRequest(what="RAPTOR cluster summary")


@dataclass(frozen=True)
class Settings:
    """`clustering`: UMAP and mixture parameters (`raptor.cluster.Clustering`); `max_layers`: summary layers
    at most (RAPTOR's num_layers, 5). A layer of at most `clustering.dim` + 1 nodes is not clustered (the
    tree ends there), nor one whose clustering would not make fewer nodes."""

    clustering: Clustering = field(default_factory=Clustering)
    max_layers: int = 5

    def key(self) -> str:
        return json.dumps({**asdict(self), "prompt": SUMMARY_SYSTEM}, sort_keys=True)


@dataclass(frozen=True)
class Node:
    """A tree node: a leaf (layer 0, its id the passage's content hash) or a summary."""

    id: str
    layer: int
    text: str
    children: tuple[str, ...]
    leaves: tuple[str, ...]
    vector: bytes


@dataclass
class Layer:
    """What summarising one layer produced: its nodes, and the clusters that failed (id -> children, reason)."""

    nodes: list[Node]
    failed: dict[str, tuple[tuple[str, ...], str]]
    asked: int = 0  # summaries the LLM wrote for this layer (the others were stored)


def state(tables: PeerTables) -> dict[str, str]:
    return {str(k): str(v) for k, v in tables.read("SELECT key, value FROM raptor_state")}


def leaf_nodes(host: PeerHost, alive: dict[str, list[int]]) -> list[Node]:
    """The alive passages (`alive`: content hash -> rows) as leaves, each content once, in content-hash order,
    with the passage vectors."""
    out = []
    for h, rows in sorted(alive.items()):
        p = host.view.passages[rows[0]]
        vector = np.asarray(host.view.passage_vectors[rows[0]], dtype=np.float32).tobytes()
        out.append(Node(h, 0, passage_block(p.title, p.text), (), (h,), vector))
    return out


def node_id(layer: int, texts: Sequence[str]) -> str:
    """The id of the summary node whose request carries `texts`: SHA-256 of the layer and the request."""
    request = json.dumps([layer, summary_messages(texts)], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(request.encode("utf-8")).hexdigest()


def sync(host: PeerHost, settings: Settings, rebuild: bool = False) -> PeerSync:
    """Bring the tree in step when the alive leaves changed since the last build, or when that build missed a
    summary and an LLM is here to ask again; otherwise nothing. `rebuild`: cluster every leaf again from
    scratch (stored summaries are still reused where a cluster's request did not change)."""
    report = PeerSync(METHOD)
    alive = passages_of(host.view)
    digest = digest_of([*alive, settings.key()])
    held = state(host.tables)
    if rebuild or held.get("built") != digest or (held.get("complete") != "1" and host.chat is not None):
        build(host, leaf_nodes(host, alive), digest, settings, report, held, rebuild)
    failed = int(host.tables.read("SELECT COUNT(*) FROM raptor_failed")[0][0])
    report.stats = {**stats(host.tables), "pending": failed if host.chat is None else 0}
    return report


def stored_nodes(tables: PeerTables) -> dict[str, Node]:
    return {
        str(i): Node(str(i), int(layer), str(text), tuple(json.loads(c)), tuple(json.loads(lv)), bytes(v))
        for i, layer, text, c, lv, v in tables.read("SELECT * FROM raptor_nodes")
    }


Clusters = dict[int, dict[str, tuple[str, ...]]]  # layer -> cluster id -> ids of its members at the layer below


def stored_clusters(tables: PeerTables, stored: dict[str, Node]) -> Clusters:
    """The stored tree's clusters by layer: every summary node's children, and every failed request's."""
    out: Clusters = {}
    for n in stored.values():
        out.setdefault(n.layer, {})[n.id] = n.children
    for i, layer, kids in tables.read("SELECT id, layer, children FROM raptor_failed"):
        out.setdefault(int(layer), {})[str(i)] = tuple(json.loads(kids))
    return out


def build(
    host: PeerHost,
    leaves: list[Node],
    digest: str,
    settings: Settings,
    report: PeerSync,
    held: dict[str, str],
    rebuild: bool = False,
) -> None:
    """Keep the stored tree's clusters (`update`: deletes leave them, additions are placed into them, failed
    summaries are asked again) when it was built with these settings; a first build, new settings or `rebuild`
    start from no clusters, so every leaf is clustered."""
    stored = stored_nodes(host.tables)
    same = held.get("settings") == digest_of([settings.key()])
    clusters = stored_clusters(host.tables, stored) if same and not rebuild else {}
    tree, failed = update(host, leaves, settings, stored, clusters, report)
    report.failed = len(failed)
    report.removed = len(set(stored) - {n.id for n in tree})
    report.embedded = len({n.id for n in tree} - set(stored))
    write(host.tables, tree, failed, (digest, digest_of([settings.key()])))


Failed = dict[str, tuple[int, tuple[str, ...], str]]  # node id -> (layer, children, reason)


def grow(
    host: PeerHost, nodes: list[Node], settings: Settings, stored: dict[str, Node], report: PeerSync, first: int = 1
) -> tuple[list[Node], Failed]:
    """The tree clustered from `nodes` (of layer `first` - 1) up, layer by layer (stored nodes reused by
    request)."""
    counter = default_counter()
    tree: list[Node] = []
    failed: Failed = {}
    for layer in range(first, settings.max_layers + 1):
        if len(nodes) <= settings.clustering.dim + 1:
            break
        clusters = cluster_points(_matrix(nodes), [counter(n.text) for n in nodes], settings.clustering)
        if len(clusters) >= len(nodes):
            break
        made = summarise(host, layer, [[nodes[i] for i in c] for c in clusters], stored)
        _record(report, made, layer, tree, failed)
        nodes = sorted(made.nodes, key=lambda n: n.id)
        if not nodes:
            break
    return tree, failed


def update(
    host: PeerHost, leaves: list[Node], settings: Settings, stored: dict[str, Node], clusters: Clusters,
    report: PeerSync,
) -> tuple[list[Node], Failed]:  # fmt: skip
    """The tree from `clusters` (the stored ones, or none), layer by layer: each cluster keeps its members that
    are still there (one left empty goes); the nodes below that no cluster holds (new leaves, summaries asked
    again) join the cluster whose centroid is nearest (`raptor.place`); a cluster that gained members and passes
    `max_tokens` is clustered again on its own. A cluster whose members did not change sends the same request,
    answered by its stored node, so only clusters that lost or gained members and those above them are asked.
    A layer without clusters (no tree yet, or above the stored tree's top) is clustered from scratch (`grow`)."""
    tree: list[Node] = []
    failed: Failed = {}
    below: dict[str, list[Node]] = {n.id: [n] for n in leaves}  # id at the layer below -> its node(s) now
    for layer in range(1, settings.max_layers + 1):
        olds = clusters.get(layer, {})
        groups = {old: _members(kids, below) for old, kids in sorted(olds.items())}
        groups = {old: kids for old, kids in groups.items() if kids}
        if not groups:
            nodes = sorted({n.id: n for ns in below.values() for n in ns}.values(), key=lambda n: n.id)
            more, missing = grow(host, nodes, settings, stored, report, layer)
            tree += [n for n in more if n.id not in {t.id for t in tree}]
            failed.update(missing)
            break
        held = {k for kids in olds.values() for k in kids}
        fresh = {n.id: n for old, ns in below.items() if old not in held for n in ns}
        parts = _split(groups, _place_into(groups, sorted(fresh.values(), key=lambda n: n.id)), settings)
        made = summarise(host, layer, [kids for _, kids in parts], stored)
        _record(report, made, layer, tree, failed)
        now = {n.id: n for n in made.nodes}
        below = {}
        for old, kids in parts:
            i = node_id(layer, [k.text for k in kids])
            if i in now:
                below.setdefault(old, []).append(now[i])
    return tree, failed


def _members(kids: Sequence[str], below: dict[str, list[Node]]) -> list[Node]:
    return sorted({n.id: n for k in kids for n in below.get(k, [])}.values(), key=lambda n: n.id)


def _place_into(groups: dict[str, list[Node]], fresh: list[Node]) -> set[str]:
    """Adds each of `fresh` to the group it fits best (all placed against the groups as they were); the ids of
    the groups that gained members."""
    olds = list(groups)
    where = place([_matrix(groups[o]) for o in olds], _matrix(fresh)) if fresh else []
    for node, g in zip(fresh, where):
        groups[olds[g]].append(node)
    gained = {olds[g] for g in where}
    for old in gained:
        groups[old].sort(key=lambda n: n.id)
    return gained


def _split(groups: dict[str, list[Node]], gained: set[str], settings: Settings) -> list[tuple[str, list[Node]]]:
    """(cluster id, members) for every group; a group that gained members and passes `max_tokens` is split by
    clustering it alone (`raptor.cluster.split_cluster`), each part keeping the cluster's id (so its parents
    hold every part)."""
    counter = default_counter()
    out: list[tuple[str, list[Node]]] = []
    for old, kids in groups.items():
        if old not in gained:
            out.append((old, kids))
            continue
        parts = split_cluster(_matrix(kids), [counter(k.text) for k in kids], settings.clustering)
        out += [(old, [kids[i] for i in part]) for part in parts]
    return out


def _record(report: PeerSync, made: Layer, layer: int, tree: list[Node], failed: Failed) -> None:
    report.extracted += made.asked
    failed.update({i: (layer, kids, why) for i, (kids, why) in made.failed.items()})
    tree += [n for n in made.nodes if n.id not in {t.id for t in tree}]


def _matrix(nodes: Sequence[Node]) -> npt.NDArray[np.float32]:
    return np.frombuffer(b"".join(n.vector for n in nodes), dtype=np.float32).reshape(len(nodes), -1)


def summarise(host: PeerHost, layer: int, clusters: list[list[Node]], stored: dict[str, Node]) -> Layer:
    """The summary node of each cluster: a stored node with the same request is reused, the others are asked
    (concurrently) and their summaries embedded (passage role)."""
    wanted: dict[str, list[Node]] = {}
    for members in clusters:
        kids = sorted(members, key=lambda n: n.id)
        wanted[node_id(layer, [k.text for k in kids])] = kids
    new = {i: summary_messages([k.text for k in kids]) for i, kids in wanted.items() if i not in stored}
    asked = ask_all(host, new, read_summary, SUMMARY, f"{METHOD} layer {layer}")
    texts = {i: str(t) for i, t in asked.replies.items()}
    vectors = vectors_for(host, list(texts.values()), {})
    out = Layer([], {i: (tuple(k.id for k in wanted[i]), why) for i, why in asked.failed.items()}, len(texts))
    for i, kids in sorted(wanted.items()):
        if i in stored:
            out.nodes.append(stored[i])
        elif i in texts:
            covered = tuple(sorted({leaf for k in kids for leaf in k.leaves}))
            out.nodes.append(Node(i, layer, texts[i], tuple(k.id for k in kids), covered, vectors[text_hash(texts[i])]))
    return out


def write(tables: PeerTables, tree: list[Node], failed: Failed, digests: tuple[str, str]) -> None:
    """Replace the tree; `digests`: of the leaves and settings it was built from, and of the settings alone."""
    now = time.time()
    with tables.transaction() as db:
        db.execute("DELETE FROM raptor_nodes")
        db.execute("DELETE FROM raptor_failed")
        db.executemany(
            "INSERT OR REPLACE INTO raptor_nodes VALUES (?, ?, ?, ?, ?, ?)",
            [(n.id, n.layer, n.text, json.dumps(n.children), json.dumps(n.leaves), n.vector) for n in tree],
        )
        db.executemany(
            "INSERT OR REPLACE INTO raptor_failed VALUES (?, ?, ?, ?, ?)",
            [(i, layer, json.dumps(kids), why, now) for i, (layer, kids, why) in sorted(failed.items())],
        )
        db.execute("INSERT OR REPLACE INTO raptor_state VALUES ('built', ?)", (digests[0],))
        db.execute("INSERT OR REPLACE INTO raptor_state VALUES ('settings', ?)", (digests[1],))
        db.execute("INSERT OR REPLACE INTO raptor_state VALUES ('complete', ?)", ("0" if failed else "1",))
        db.execute("INSERT OR REPLACE INTO raptor_state VALUES ('generation', ?)", (str(time.time_ns()),))


def stats(tables: PeerTables) -> dict[str, int]:
    rows = tables.read("SELECT layer, COUNT(*) FROM raptor_nodes GROUP BY layer")
    failed = int(tables.read("SELECT COUNT(*) FROM raptor_failed")[0][0])
    return {
        "summaries": sum(int(n) for _, n in rows),
        "layers": max((int(layer) for layer, _ in rows), default=0),
        "failed": failed,
    }
