"""The last view's edge arrays saved with the state, so that the first query after an open starts from them
instead of building the graph's adjacency and walk from every edge (at 100k passages about a second).

`walk_files` adds `walk-<name>.npy` files to the snapshot's state files (engram.index.saved.state_file), under the
same checksum manifest, when the state's patch base (engram.index.state.patch_base) is its current graph: no change
recorded since the view it was taken from, and the same nodes. The save patches the base first when changes
came after it (`patchable`), but never builds a graph from every edge: that is what the first query after an open
does anyway, and at the end of a large build it would add its arrays to the build's peak memory (0.3 GiB at
100k passages, bench/README.md). So a memory built and closed with no query in between saves no graph; the next
session that reads it and writes saves one. `restore_walk` maps them read-only at open and
holds them as the patch base, while a thread computes their checksums; the first view waits for that check
(`StateCaches.base_check`) and builds from the edges as before when a file does not match. Files that do not
fit the state (sizes, node counts) are not used either. Either way the view is the built one to the bit.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.graph.ppr import restored_walk
from engram.index.state.index_state import IndexState
from engram.index.state.patch_base import PatchBase
from engram.store.snapshot import PendingCheck, Writer, array_writer

NAMES = (
    "indptr",
    "indices",
    "weights",
    "walk",
    "root",
    "inverse_root",
    "dangling",
    "node_rows",
    "relation",
    "support",
    "relation_keys",
    "context",
    "phrase_passages",
)
FILES = tuple(f"walk-{name}.npy" for name in NAMES)
log = logging.getLogger(__name__)
Array = npt.NDArray[Any]


def current_base(state: IndexState, node_rows: npt.NDArray[np.int64]) -> PatchBase | None:
    """The state's patch base when it is the current graph: nothing touched since it was taken, the same
    phrase rows and the same canonical nodes (`node_rows`)."""
    base, touched, pairs = state.caches.patch_base, state.caches.touched, state.synonyms.touched
    if base is None or touched is None or pairs is None or touched.relation or touched.passages or pairs:
        return None
    if base.n_phrases != len(state.phrases) or not np.array_equal(base.node_rows, node_rows):
        return None
    return base


def patchable(state: IndexState) -> bool:
    """Whether the state holds a base that the changes recorded since it can patch (not past their limit)."""
    touched, pairs = state.caches.touched, state.synonyms.touched
    return (
        state.caches.patch_base is not None
        and touched is not None
        and pairs is not None
        and len(pairs) <= touched.limit
    )


def walk_files(state: IndexState, node_rows: npt.NDArray[np.int64]) -> tuple[dict[str, Writer], dict[str, int] | None]:
    """The writers of the saved walk's files and what `state.json` records of it (None: nothing saved)."""
    base = current_base(state, node_rows)
    if base is None:
        return {}, None
    adjacency, walk = base.adjacency, base.walk
    arrays: dict[str, Array] = {
        "indptr": adjacency.indptr,
        "indices": adjacency.indices,
        "weights": adjacency.data,
        "walk": walk.matrix.data,
        "root": walk.root,
        "inverse_root": walk.inverse_root,
        "dangling": walk.dangling,
        "node_rows": base.node_rows,
        "relation": base.relation,
        "support": base.support,
        "relation_keys": base.relation_keys,
        "context": base.context,
        "phrase_passages": base.phrase_passages,
    }
    writers = {f"walk-{name}.npy": array_writer(array) for name, array in arrays.items()}
    return writers, {"n_phrases": base.n_phrases, "nodes": len(base.node_rows)}


def restore_walk(state: IndexState, folder: Path, sums: dict[str, str], meta: dict[str, int] | None) -> None:
    """Hold the saved walk of snapshot `folder` as the restored state's patch base (mapped; used once its
    checksums match), when `state.json` names one and its files fit the state; else leave the state without."""
    if not meta or not all(name in sums for name in FILES):
        return
    try:
        arrays = {name: np.load(folder / f"walk-{name}.npy", mmap_mode="r", allow_pickle=False) for name in NAMES}
        base = _base(arrays, int(meta["n_phrases"]), int(meta["nodes"]), len(state.phrases), len(state.passages))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("saved walk in %s is not used (%s): the first query builds it", folder, exc)
        return
    state.caches.keep_patch_base(base)
    state.caches.base_check = PendingCheck(folder, sums, list(FILES))


def _base(arrays: dict[str, Array], n_phrases: int, nodes: int, phrases: int, passages: int) -> PatchBase:
    """The patch base the arrays describe, after checking that their sizes fit each other and the state."""
    indptr, indices, weights = arrays["indptr"], arrays["indices"], arrays["weights"]
    nnz = len(indices)
    node_rows, relation, context = arrays["node_rows"], arrays["relation"], arrays["context"]
    fits = [
        n_phrases == phrases,
        len(node_rows) == nodes,
        indptr.shape == (nodes + 1,) and len(indptr) and int(indptr[0]) == 0 and int(indptr[-1]) == nnz,
        weights.shape == arrays["walk"].shape == (nnz,),
        all(arrays[name].shape == (nodes,) for name in ("root", "inverse_root", "dangling")),
        relation.ndim == 2 and relation.shape[1] == 2 and context.ndim == 2 and context.shape[1] == 2,
        arrays["support"].shape == arrays["relation_keys"].shape == (len(relation),),
        arrays["phrase_passages"].shape == (phrases,),
        not len(node_rows) or (int(node_rows.min()) >= 0 and int(node_rows.max()) < phrases + passages),
    ]
    if not all(fits):
        raise ValueError("its arrays do not fit the saved state")
    adjacency = sp.csr_matrix((weights, indices, indptr), shape=(nodes, nodes), copy=False)
    adjacency.has_canonical_format = True  # saved from a canonical matrix; the checksums vouch for the bytes
    walk = restored_walk(adjacency, arrays["walk"], arrays["root"], arrays["inverse_root"], arrays["dangling"])
    return PatchBase(
        adjacency, node_rows, n_phrases, relation, arrays["support"], arrays["relation_keys"], context,
        arrays["phrase_passages"], walk,
    )  # fmt: skip
