"""The phrase ANN index kept on disk beside the vector snapshot, so a large memory does not rebuild it on open.

`index/ann/` holds `phrase-links.faiss` (the index's links, its entries in insertion order, saved without the half-
precision vector copies it searches: those are filled from the state's phrase vectors when it is loaded, so each
phrase vector is on disk once), optionally `phrase-links-added.faiss` (the entries added since `phrase-links.faiss`
was written, which follow its entries, saved the same way), `phrase-rows.npy` (int64, the writing process's phrase
row of each entry, -1 for none), `phrase-keys.npy` (uint8, the SHA-256 of each entry's phrase, 32 per entry),
`phrase-lost.npy` (int64, the entries that their own search did not return, see engram.graph.synonyms; optional:
older caches lack it) and `manifest.json` (the files' checksums, CRC-32 for the graphs, and the saved state whose
rows the labels are, written last). Graphs saved with their vectors by engram before are named `phrase.faiss` and
`phrase-added.faiss`: they are read with their own vectors, and the next save writes the new files (engram before
this cannot read the new names and rebuilds its index). Loading maps the graph read-only (engram.graph.ann) and
reads the added graph into RAM; a save leaves the graph's file as it is while the additions stay within
`ADDED_SHARE` of it, and otherwise writes one graph of all entries. It is a cache like the snapshot: on opening from
that saved state the labels are taken as they are, else entries are matched to the new process's rows by phrase hash
(entries of phrases no longer in the memory are dropped from results); files that do not match their checksums are
ignored (the index is then rebuilt when first needed); a change checks them on a thread while it builds its tables
(`start_check`), so its synonym search does not wait for gigabytes to be read. Files are written under temporary
names and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from engram.graph.ann import AnnIndex
from engram.index.state.index_state import IndexState
from engram.store.snapshot import CRC, PendingCheck, SnapshotDamaged, file_checksum, verify_files

INDEX_FILE = "phrase-links.faiss"  # the graph's links, saved without its vectors
ADDED_FILE = "phrase-links-added.faiss"  # entries added since phrase-links.faiss was written (optional)
# the same two, saved with their vectors by engram before: still read; the next save writes the new ones
WITH_VECTORS = {INDEX_FILE: "phrase.faiss", ADDED_FILE: "phrase-added.faiss"}
KEY_FILES = ("phrase-rows.npy", "phrase-keys.npy")
ADDED_SHARE = 0.25  # more entries added than this share of the saved graph: the next save writes one graph
LOST_FILE = "phrase-lost.npy"  # entries no search reaches (AnnIndex.lost, as entry numbers; optional)
log = logging.getLogger(__name__)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def save_ann(root: Path, state: IndexState, token: str | None = None) -> None:
    """Write the phrase ANN index of `state`, when it has one. `token` names the saved state whose rows its
    labels are (the checksum of that snapshot's `state.json`). A loaded index whose entries added since are
    at most `ADDED_SHARE` of its saved graph keeps that file as it is and writes the additions beside it."""
    index = state.synonyms.ann
    if index is None:
        if token is not None and state.caches.saved_as is not None:
            _rename_state(root / "index" / "ann", state.caches.saved_as, token)
        return
    folder = root / "index" / "ann"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)  # the old files stop counting before any is replaced
    sums = {}
    few = index.added_entries <= ADDED_SHARE * index.base_entries
    current = index.base_path == folder / INDEX_FILE  # not a graph saved with its vectors, before
    kept = index.base_checksum if few and current and index.base_on_disk() else None
    if kept is not None:  # the saved graph's file is the one mapped, untouched: it stays as it is
        sums[INDEX_FILE] = kept
        if index.added_entries:
            index.write_added(folder / ADDED_FILE)
            sums[ADDED_FILE] = file_checksum(folder / ADDED_FILE, CRC)
    else:
        index.write(folder / INDEX_FILE)
        sums[INDEX_FILE] = index.base_checksum = file_checksum(folder / INDEX_FILE, CRC)
    if ADDED_FILE not in sums:
        (folder / ADDED_FILE).unlink(missing_ok=True)
    for name in WITH_VECTORS.values():  # written before, now replaced (the index no longer maps them)
        (folder / name).unlink(missing_ok=True)
    rows = index.labels
    digests = b"".join(_digest(state.phrases[r]) if r >= 0 else bytes(32) for r in rows.tolist())
    keys = np.frombuffer(digests, dtype=np.uint8).reshape(-1, 32)
    lost = np.flatnonzero(np.isin(rows, np.fromiter(index.lost, dtype=np.int64, count=len(index.lost))))
    lost = lost[rows[lost] >= 0].astype(np.int64)
    for name, array in (("phrase-rows.npy", rows), ("phrase-keys.npy", keys), (LOST_FILE, lost)):
        tmp = folder / f".{name}.tmp"
        with tmp.open("wb") as handle:
            np.save(handle, array, allow_pickle=False)
        sums[name] = file_checksum(tmp)
        os.replace(tmp, folder / name)
    tmp = folder / ".manifest.json.tmp"
    tmp.write_text(json.dumps({"files": sums, "dim": index.dim, "state": token}), encoding="utf-8")
    os.replace(tmp, folder / "manifest.json")


def _rename_state(folder: Path, old: str, new: str) -> None:
    """The index on disk was not loaded by this process: if its labels are the rows of saved state `old`, which
    this process's state was restored from, they are also the rows of `new`, which it has just written (a row
    never changes its phrase; rows added since are not in the index). Say so in its manifest, so the next
    process takes the labels as they are instead of matching every phrase by hash."""
    path = folder / "manifest.json"
    if not path.exists():  # no index saved (a memory too small for one): nothing to rename
        return
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or manifest.get("state") != old:
            return
        tmp = folder / ".manifest.json.tmp"
        tmp.write_text(json.dumps({**manifest, "state": new}), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, ValueError) as exc:  # the next load finds what is wrong and rebuilds the index
        log.warning("phrase ANN index in %s: its manifest was not updated (%s)", folder, exc)


def _graph_file(sums: dict[str, str], name: str) -> str | None:
    """The file a manifest lists for graph `name` (`INDEX_FILE` or `ADDED_FILE`): that name, the name it had
    when graphs were saved with their vectors, or None."""
    return next((n for n in (name, WITH_VECTORS[name]) if n in sums), None)


def _listed(sums: dict[str, str]) -> list[str]:
    """The files a manifest's index is made of (the added graph and the lost entries when it lists them)."""
    graphs = [_graph_file(sums, INDEX_FILE) or INDEX_FILE, _graph_file(sums, ADDED_FILE)]
    return [*(name for name in graphs if name), *KEY_FILES, *([LOST_FILE] if LOST_FILE in sums else [])]


def start_check(root: Path) -> PendingCheck | None:
    """Start checking the saved index's files against their checksums on a thread, for a `load_ann` that may
    follow (a change's first synonym search): the gigabytes of a large memory's graph are then read while the
    change does its other work. None when there is no saved index or its manifest cannot be read."""
    folder = root / "index" / "ann"
    try:
        sums = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["files"]
        return PendingCheck(folder, sums, _listed(sums))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _verify(folder: Path, sums: dict[str, str], check: PendingCheck | None) -> None:
    """Raise `SnapshotDamaged` unless the index's files match their checksums: the result of `check` when it
    checked these files, as listed now and unchanged since it began, else a check made now."""
    names = _listed(sums)
    if check is not None and check.folder == folder and check.sums == {n: sums.get(n) for n in names}:
        error = check.error()
        if check.unchanged():
            if error:
                raise SnapshotDamaged(error)
            return
    verify_files(folder, sums, names)


def load_ann(root: Path, state: IndexState, token: str | None = None, check: PendingCheck | None = None) -> bool:
    """Give `state` the saved phrase ANN index, relabelled with its rows (kept as they are when `state` was
    restored from the saved state named `token` that the index was written with). False when there is none or
    it is damaged (then the index is built when first needed). `check`: a `start_check` of these files."""
    folder = root / "index" / "ann"
    if not (folder / "manifest.json").exists():
        return False
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        sums = manifest["files"]
        base, added, with_lost = _graph_file(sums, INDEX_FILE), _graph_file(sums, ADDED_FILE), LOST_FILE in sums
        if base is None:
            raise ValueError("its manifest lists no graph")
        _verify(folder, sums, check)
        old = np.load(folder / "phrase-rows.npy", allow_pickle=False)
        keys = np.load(folder / "phrase-keys.npy", allow_pickle=False)
        if old.ndim != 1 or keys.shape != (len(old), 32):
            raise ValueError("rows and keys disagree")
        if token is not None and manifest.get("state") == token:
            if len(old) and int(old.max()) >= len(state.phrases):
                raise ValueError("rows beyond the saved state's phrases")
            new = old.astype(np.int64)
        else:
            where = {_digest(k): row for row, k in enumerate(state.phrases)}
            new = np.fromiter(
                (where.get(k.tobytes(), -1) if r >= 0 else -1 for r, k in zip(old.tolist(), keys)),
                dtype=np.int64,
                count=len(keys),
            )
        phrases = state.vectors["phrase"]
        view = phrases.view()
        if len(new) and int(new.max()) >= len(view):
            raise ValueError("entries of phrases whose vectors this state does not hold")
        index = AnnIndex.load(
            folder / base,
            phrases.dim,
            folder / added if added else None,
            vectors=lambda rows: phrases.gather(view, rows),  # for graphs saved without their vectors
            labels=new,
        )
        index.base_checksum = str(sums[base]) if index.base_entries else None
        lost = np.load(folder / LOST_FILE, allow_pickle=False) if with_lost else np.zeros(0, dtype=np.int64)
        if (
            lost.ndim != 1
            or lost.dtype.kind not in "iu"
            or (len(lost) and not 0 <= int(lost.min()) <= int(lost.max()) < len(new))
        ):
            raise ValueError("lost entries beyond the index")
        index.lost = set(new[lost][new[lost] >= 0].tolist())
    except (OSError, ValueError, KeyError, TypeError, SnapshotDamaged) as exc:
        log.warning("phrase ANN index in %s is not used (%s): it is rebuilt when needed", folder, exc)
        return False
    present = np.zeros(len(state.phrases), dtype=bool)
    present[new[new >= 0]] = True
    state.synonyms.adopt_ann(index, present)
    return True
