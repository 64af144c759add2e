"""The approximate synonym search (issue 11): its recall against exact search, and that what it finds is exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram import GraphConfig, GraphSnapshot, InputError, MemoryConfig
from engram.embed import HashEmbedder
from engram.graph import ann
from engram.graph.synonyms import SynonymLists
from rooms import Rooms

if not ann.available():
    pytest.skip("the ann extra (faiss-cpu) is not installed", allow_module_level=True)

from engram.graph.ann import AnnIndex

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai")]


def phrases(count: int, seed: int = 0) -> list[str]:
    """Names of 1-3 made-up words; a fifth are variants of an earlier one (a word added, or a plural), the
    pairs a synonym search must find."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        if out and rng.random() < 0.2:
            base = out[int(rng.integers(0, len(out)))]
            name = base + ("s" if rng.random() < 0.5 else " " + "".join(rng.choice(SYLLABLES, 2)))
        else:
            name = " ".join("".join(rng.choice(SYLLABLES, int(rng.integers(2, 4)))) for _ in range(rng.integers(1, 4)))
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def lists_of(ann_min_rows: int | None, keys: list[str], vectors: np.ndarray) -> SynonymLists:
    lists = SynonymLists(threshold=0.8, top_k=100, ann_min_rows=ann_min_rows)
    rows = np.arange(len(keys), dtype=np.int64)
    lists.add(rows, rows, lambda r: vectors[r], keys)
    return lists


def pairs(lists: SynonymLists) -> dict[tuple[int, int], float]:
    return {(row, other): sim for row, items in lists.lists.items() for sim, _, other in items}


def test_ann_recall_against_exact_search_at_threshold_08() -> None:
    keys = phrases(4000)
    vectors = HashEmbedder(dim=384).embed(keys)
    exact = pairs(lists_of(None, keys, vectors))
    approximate = pairs(lists_of(0, keys, vectors))
    assert len(exact) > 500  # the data has synonym pairs to find
    found = set(exact) & set(approximate)
    assert len(found) / len(exact) >= 0.99
    assert set(approximate) <= set(exact)  # nothing invented: every hit passed the exact threshold
    assert all(approximate[p] == exact[p] for p in found)  # with the exact cosines


def test_ann_lists_follow_inserts_and_deletes() -> None:
    keys = phrases(3000, seed=1)
    vectors = HashEmbedder(dim=384).embed(keys)
    of = lambda r: vectors[r]  # noqa: E731
    lists = SynonymLists(threshold=0.8, top_k=3, ann_min_rows=0)
    first = np.arange(2000, dtype=np.int64)
    lists.add(first, first, of, keys)
    rest = np.arange(2000, 3000, dtype=np.int64)
    alive = np.arange(3000, dtype=np.int64)
    lists.add(rest, alive, of, keys)
    dead = np.arange(0, 3000, 7, dtype=np.int64)
    survivors = np.setdiff1d(alive, dead)
    lists.remove(dead, survivors, of, keys)
    fresh = SynonymLists(threshold=0.8, top_k=3)
    fresh.add(survivors, survivors, of, keys)
    got, want = pairs(lists), pairs(fresh)
    assert len(set(got) & set(want)) / len(want) >= 0.99
    gone = set(dead.tolist())
    assert not any(row in gone or other in gone for row, other in got)


def test_index_search_save_and_load(tmp_path: Path) -> None:
    vectors = HashEmbedder(dim=64).embed(phrases(500, seed=2))
    index = AnnIndex(64)
    index.add(np.arange(300), vectors[:300])
    index.add(np.arange(300, 500), vectors[300:])
    sims, rows = index.search(vectors[:5], 3)
    assert rows[:, 0].tolist() == [0, 1, 2, 3, 4] and np.allclose(sims[:, 0], 1.0, atol=0.02)
    index.write(tmp_path / "a.faiss")
    with pytest.raises(ValueError, match="without its vectors"):
        AnnIndex.load(tmp_path / "a.faiss", 64)  # the links alone are saved
    loaded = AnnIndex.load(tmp_path / "a.faiss", 64, vectors=lambda r: vectors[r])
    assert loaded.size == 500 and loaded.search(vectors[:5], 3)[1].tolist() == rows.tolist()
    labels = np.arange(500)
    labels[[0, 1]] = [1, 0]
    labels[2] = -1  # an entry whose phrase is gone: never returned
    loaded.relabel(labels)
    assert loaded.search(vectors[:3], 1)[1].ravel().tolist() == [1, 0, -1]
    assert sorted(loaded.rows().tolist()) == [r for r in range(500) if r != 2]
    with pytest.raises(ValueError):
        loaded.relabel(labels[:10])
    (tmp_path / "bad.faiss").write_bytes(b"not an index")
    with pytest.raises(ValueError):
        AnnIndex.load(tmp_path / "bad.faiss", 64)
    with pytest.raises(ValueError):
        AnnIndex.load(tmp_path / "a.faiss", 32, vectors=lambda r: vectors[r])


def test_ann_setting_is_checked() -> None:
    with pytest.raises(InputError, match="auto, on or off"):
        MemoryConfig.from_dict({"graph": {"ann": "maybe"}})
    assert GraphConfig(ann="on").ann == "on"


def ann_memory(path: Path, seed: int) -> tuple[list[Any], list[dict[str, Any]], MemoryConfig]:
    """A memory with ANN search forced, built from the first 200 of 299 documents (two phrases each); returns
    all the documents, their extractions and the config."""
    from engram import Document, Memory

    names = phrases(600, seed=seed)
    docs = [Document(f"d{i}", f"{names[i]} is near {names[i + 1]}.") for i in range(0, 598, 2)]
    extractions = [{"id": f"d{i}", "triples": [[names[i], "is near", names[i + 1]]]} for i in range(0, 598, 2)]
    config = MemoryConfig(graph=GraphConfig(ann="on"))
    with Memory(path, embedder=HashEmbedder(dim=64), config=config) as memory:
        memory.index(docs[:200], extractions=extractions[:200])
    return docs, extractions, config


@pytest.mark.parametrize("records", [False, True])
def test_memory_keeps_its_ann_index_across_reopen(
    tmp_path: Path, records: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reopened from the saved state, the index's labels are that state's rows as they are; rebuilt from the
    records (rows may differ), they are matched by phrase hash."""
    import faiss

    from engram import Memory

    docs, extractions, config = ann_memory(tmp_path / "m", seed=3)
    assert (tmp_path / "m" / "index" / "ann" / "manifest.json").exists()
    saved: Any = faiss.read_index(str(tmp_path / "m" / "index" / "ann" / "phrase-links.faiss"))
    assert saved.ntotal == 400 and saved.storage is None  # the links alone: the vectors are in the snapshot
    if records:
        for state_file in (tmp_path / "m" / "index").glob("g*/state.json"):
            state_file.unlink()
    else:  # the labels are taken as they are: no phrase is hashed to match them
        import engram.index.saved.ann_cache as ann_cache

        def no_hashing(key: str) -> bytes:
            raise AssertionError("relabelled by hash")

        monkeypatch.setattr(ann_cache, "_digest", no_hashing)
    with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
        state = memory.live.load()
        assert state.synonyms.ann is None and state.synonyms.ann_loader is not None  # opening does not read it
        state.synonyms.ann_loader()  # what the first synonym search that wants the index runs
        monkeypatch.undo()  # (writing the index again on close hashes the phrases)
        index = state.synonyms.ann
        assert index is not None and index.size == len(state.phrases)
        rows = np.arange(0, len(state.phrases), 37)
        assert index.search(state.vectors["phrase"].view()[rows], 1)[1].ravel().tolist() == rows.tolist()
        memory.index(docs[200:], extractions=extractions[200:])  # the loaded index takes the new phrases
        memory.delete([d.id for d in docs[:50]])
        grown = memory.graph()
    with Memory(tmp_path / "fresh", embedder=HashEmbedder(dim=64), config=MemoryConfig()) as fresh:
        fresh.index(docs[50:], extractions=extractions[50:])
        assert fresh.graph() == grown  # the ANN found the exact neighbours here


def test_ann_on_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from engram.graph import ann
    from engram.index.state.index_state import ann_rows

    monkeypatch.setattr(ann, "available", lambda: False)
    with pytest.raises(InputError, match=r"engram\[ann\]"):
        ann_rows(GraphConfig(ann="on"))
    assert ann_rows(GraphConfig(ann="auto")) is None and ann_rows(GraphConfig(ann="off")) is None


def test_auto_mode_picks_the_cheaper_search() -> None:
    lists = SynonymLists(ann_min_rows=1000)
    targets = np.arange(100_000, dtype=np.int64)
    assert not lists._use_ann(9, targets)  # a few new phrases and no index yet: exact
    assert lists._use_ann(50_000, targets)  # a large batch: building the index pays
    assert not lists._use_ann(50_000, targets[:500])  # below ann_min_rows: exact
    lists.ann_present = np.ones(100_000, dtype=bool)
    assert lists._use_ann(9, targets)  # the index is there: 9 searches beat 900k cosines


def test_using_the_ann_index_then_the_default_embedder_does_not_crash() -> None:
    """usearch (the first library tried) loaded before onnxruntime crashed the process at onnxruntime's import
    (exit 139); the ANN library must not."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from engram.graph.ann import AnnIndex\n"
        "index = AnnIndex(8)\n"
        "index.add(np.arange(3), np.eye(3, 8, dtype=np.float32))\n"
        "import onnxruntime\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-500:])


def test_a_session_that_never_loads_the_index_keeps_its_labels_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session that only deletes (no synonym search, so the index is never loaded) writes a new saved state
    on close; the index's manifest then names that state, so the next session takes its labels as they are.
    Oracle: the lists of a memory built from scratch with the same documents."""
    import engram.index.saved.ann_cache as ann_cache
    from engram import Memory

    docs, extractions, config = ann_memory(tmp_path / "m", seed=4)
    with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
        memory.delete([d.id for d in docs[:20]])
        assert memory.live.load().synonyms.ann is None  # not loaded by this session
    manifest = json.loads((tmp_path / "m" / "index" / "ann" / "manifest.json").read_text(encoding="utf-8"))
    latest = max((tmp_path / "m" / "index").glob("g*"), key=lambda p: int(p.name[1:]))
    written = json.loads((latest / "manifest.json").read_text(encoding="utf-8"))["files"]["state.json"]
    assert manifest["state"] == written

    def no_hashing(key: str) -> bytes:
        raise AssertionError("relabelled by hash")

    with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
        monkeypatch.setattr(ann_cache, "_digest", no_hashing)
        memory.live.load().synonyms.ann_loader()  # what the next synonym search runs
        monkeypatch.undo()
        memory.index(docs[200:], extractions=extractions[200:])
        grown = memory.graph()
    with Memory(tmp_path / "fresh", embedder=HashEmbedder(dim=64), config=MemoryConfig()) as fresh:
        fresh.index(docs[20:], extractions=extractions[20:])
        assert fresh.graph() == grown


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Each query's k best cosines (float64, descending): the oracle for what a search returns."""
    sims = queries.astype(np.float64) @ vectors.astype(np.float64).T
    return -np.sort(-sims, axis=1)[:, :k]


def found(index: AnnIndex, vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """The exact cosines of the rows a search returns, in its order (rows in near ties may come either way)."""
    rows = index.search(queries, k)[1]
    assert (rows >= 0).all()
    return np.einsum("qd,qkd->qk", queries.astype(np.float64), vectors[rows].astype(np.float64))


def test_a_loaded_index_maps_its_graph_and_grows_beside_it(tmp_path: Path) -> None:
    """Loaded, the saved graph is mapped read-only and additions go to a graph in RAM; searches merge both.
    Oracle: exact top-k by float64 products (the graphs are small and searched wide, so HNSW is exact here);
    saved additions load again beside the base, and `write` merges both into one graph."""
    vectors = HashEmbedder(dim=64).embed(phrases(700, seed=5))
    queries = vectors[::7]
    index = AnnIndex(64, ef_search=400)
    index.add(np.arange(500), vectors[:500])
    index.write(tmp_path / "a.faiss")

    def of(rows: np.ndarray) -> np.ndarray:
        return np.asarray(vectors[rows])

    loaded = AnnIndex.load(tmp_path / "a.faiss", 64, vectors=of)
    loaded.ef_search = 400
    assert (loaded.base_entries, loaded.added_entries) == (500, 0) and loaded.base_on_disk()
    loaded.add(np.arange(500, 700), vectors[500:])
    assert (loaded.base_entries, loaded.added_entries) == (500, 200)
    want = exact_top(vectors, queries, 5)
    assert np.allclose(found(loaded, vectors, queries, 5), want, atol=1e-6)
    loaded.write_added(tmp_path / "added.faiss")
    again = AnnIndex.load(tmp_path / "a.faiss", 64, tmp_path / "added.faiss", vectors=of)
    again.ef_search = 400
    assert (again.base_entries, again.added_entries) == (500, 200)
    assert np.allclose(found(again, vectors, queries, 5), want, atol=1e-6)
    loaded.write(tmp_path / "a.faiss")  # merged; the index now maps the file it wrote
    assert (loaded.base_entries, loaded.added_entries) == (700, 0) and loaded.base_on_disk()
    assert np.allclose(found(loaded, vectors, queries, 5), want, atol=1e-6)
    whole = AnnIndex.load(tmp_path / "a.faiss", 64, vectors=of)
    whole.ef_search = 400
    assert whole.base_entries == 700 and np.allclose(found(whole, vectors, queries, 5), want, atol=1e-6)
    # a base file replaced under a loaded index: the merge reads the mapped graph, not the new file
    (tmp_path / "a.faiss").unlink()
    assert not again.base_on_disk()
    again.write(tmp_path / "b.faiss")
    merged = AnnIndex.load(tmp_path / "b.faiss", 64, vectors=of)
    merged.ef_search = 400
    assert merged.base_entries == 700 and np.allclose(found(merged, vectors, queries, 5), want, atol=1e-6)
    with pytest.raises(ValueError):
        AnnIndex.load(tmp_path / "b.faiss", 64, tmp_path / "missing.faiss", vectors=of)


@pytest.mark.parametrize("records", [False, True])
def test_the_lost_rows_are_saved_with_the_index(tmp_path: Path, records: bool) -> None:
    """The rows no search reaches stay known across sessions (later phrases are paired with them), as rows of
    the reopened state whether its labels are taken as they are or matched by phrase hash; a cache written
    before `phrase-lost.npy` existed loads with none."""

    docs, extractions, config = ann_memory(tmp_path / "m", seed=8)
    folder = tmp_path / "m" / "index" / "ann"

    def session(part: slice, lost: set[int] | None = None) -> tuple[set[str], set[str]]:
        """The lost phrases as loaded, and as the session ends (what its close saves)."""
        with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
            state = memory.live.load()
            state.synonyms.ann_loader()
            index = state.synonyms.ann
            assert index is not None
            loaded = {state.phrases[r] for r in index.lost}
            if lost is not None:
                index.lost = set(lost)
            memory.index(docs[part], extractions=extractions[part])  # a change: the close saves the index
            phrases = memory.live.load().phrases
            return loaded, {phrases[r] for r in index.lost}

    _, saved = session(slice(200, 210), lost={3, 17, 101})
    assert len(saved) >= 3
    if records:  # rebuilt from the records: rows are matched by phrase hash
        for state_file in (tmp_path / "m" / "index").glob("g*/state.json"):
            state_file.unlink()
    assert session(slice(210, 212))[0] == saved
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    del manifest["files"]["phrase-lost.npy"]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (folder / "phrase-lost.npy").unlink()
    assert session(slice(0, 0))[0] == set()


def test_a_few_additions_are_saved_beside_the_untouched_graph(tmp_path: Path) -> None:
    """A session that adds a few phrases to a loaded index writes them beside `phrase-links.faiss`, which stays the
    same file; the next session loads both; many additions are merged into one graph again. Each time the
    lists are those of a memory built from scratch (exact neighbours found here)."""
    from engram import Memory

    docs, extractions, config = ann_memory(tmp_path / "m", seed=6)
    folder = tmp_path / "m" / "index" / "ann"
    before = (folder / "phrase-links.faiss").stat()

    def session(part: slice) -> tuple[int, int, GraphSnapshot]:
        with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
            memory.live.load().synonyms.ann_loader()
            index = memory.live.load().synonyms.ann
            assert index is not None
            sizes = index.base_entries, index.added_entries
            memory.index(docs[part], extractions=extractions[part])
            return *sizes, memory.graph()

    def fresh(count: int) -> GraphSnapshot:
        with Memory(tmp_path / f"fresh{count}", embedder=HashEmbedder(dim=64), config=MemoryConfig()) as memory:
            memory.index(docs[:count], extractions=extractions[:count])
            return memory.graph()

    assert session(slice(200, 230))[:2] == (400, 0)  # 60 phrases added: 15 % of the graph
    after = (folder / "phrase-links.faiss").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert "phrase-links-added.faiss" in json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["files"]
    base, added, grown = session(slice(230, 299))  # 138 more: 198 in all, past a quarter of the graph
    assert (base, added) == (400, 60) and grown == fresh(299)
    assert not (folder / "phrase-links-added.faiss").exists()
    assert session(slice(0, 0))[:2] == (598, 0)


def test_an_index_saved_with_its_vectors_by_an_older_engram_is_read_and_replaced(tmp_path: Path) -> None:
    """An older engram saved `phrase.faiss` with its half-precision vectors: a session reads it with them (no
    rebuild, no vectors filled), and its next save writes `phrase-links.faiss` without them and removes the old
    file, even for a few additions. Oracle: the lists of a memory built from scratch (exact neighbours here)."""
    import faiss

    from engram import Memory
    from engram.store.snapshot import CRC, file_checksum

    docs, extractions, config = ann_memory(tmp_path / "m", seed=4)
    folder = tmp_path / "m" / "index" / "ann"
    with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
        state = memory.live.load()
        rows = np.load(folder / "phrase-rows.npy")
        vectors = state.vectors["phrase"].view()[rows]
    links: Any = faiss.read_index(str(folder / "phrase-links.faiss"))
    storage = faiss.IndexScalarQuantizer(64, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    storage.add(vectors)
    links.storage = storage
    faiss.write_index(links, str(folder / "phrase.faiss"))  # as the older engram wrote it
    links.storage = None
    (folder / "phrase-links.faiss").unlink()
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    del manifest["files"]["phrase-links.faiss"]
    manifest["files"]["phrase.faiss"] = file_checksum(folder / "phrase.faiss", CRC)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
        state = memory.live.load()
        state.synonyms.ann_loader()
        index = state.synonyms.ann
        assert index is not None and index.base_path == folder / "phrase.faiss" and index.base_entries == 400
        memory.index(docs[200:210], extractions=extractions[200:210])  # a few additions
        grown = memory.graph()
    assert not (folder / "phrase.faiss").exists() and (folder / "phrase-links.faiss").exists()
    assert set(json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["files"]) >= {"phrase-links.faiss"}
    with Memory(tmp_path / "fresh", embedder=HashEmbedder(dim=64), config=MemoryConfig()) as fresh:
        fresh.index(docs[:210], extractions=extractions[:210])
        assert fresh.graph() == grown
    with Rooms(tmp_path / "m", HashEmbedder(dim=64), config) as memory:
        state = memory.live.load()
        state.synonyms.ann_loader()
        index = state.synonyms.ann
        assert index is not None and index.base_path == folder / "phrase-links.faiss" and index.base_entries == 420
