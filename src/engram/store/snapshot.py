"""Index snapshots: the derived arrays retrieval needs (vectors and synonym edges), one folder a generation.

`index/g{N}/` holds passages.npy, phrases.npy, facts.npy (float32, one L2-normalised row per item in the
order of rows.json), synonyms.npy (int64 pairs) and synonym_weights.npy, and rows.json (passage ids, phrase
keys and facts, in row order). A snapshot is written to a temporary folder and renamed into place, and only
then does the SQLite transaction that names generation N commit; a crash in between leaves an unused folder
that the next write removes. Arrays are loaded memory-mapped; nothing is pickled.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.types import Triple

ARRAYS = ("passages", "phrases", "facts", "synonyms", "synonym_weights")


@dataclass(frozen=True)
class Snapshot:
    passage_ids: list[str]
    phrases: list[str]
    facts: list[Triple]
    arrays: dict[str, npt.NDArray[Any]]


def snapshot_dir(root: Path, generation: int) -> Path:
    return root / "index" / f"g{generation}"


def write_snapshot(root: Path, generation: int, snapshot: Snapshot) -> None:
    final = snapshot_dir(root, generation)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".g{generation}.", dir=final.parent))
    try:
        for name in ARRAYS:
            np.save(tmp / f"{name}.npy", snapshot.arrays[name], allow_pickle=False)
        rows = {"passage_ids": snapshot.passage_ids, "phrases": snapshot.phrases, "facts": snapshot.facts}
        (tmp / "rows.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_snapshot(root: Path, generation: int) -> Snapshot | None:
    """The snapshot of `generation`, or None when it is missing or damaged (the caller rebuilds it)."""
    folder = snapshot_dir(root, generation)
    try:
        rows = json.loads((folder / "rows.json").read_text(encoding="utf-8"))
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in ARRAYS}
        facts = [(str(s), str(r), str(o)) for s, r, o in rows["facts"]]
        return Snapshot(list(rows["passage_ids"]), list(rows["phrases"]), facts, arrays)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_other_snapshots(root: Path, keep: int) -> None:
    folder = root / "index"
    if not folder.exists():
        return
    for child in folder.iterdir():
        if child.name != f"g{keep}":
            shutil.rmtree(child, ignore_errors=True)
