"""Vector snapshots: the embedding cache dumped to `.npy` files, for fast opening.

`index/g{N}/` holds, per role (passage, phrase, fact), `{role}.npy` (float32, one L2-normalised row per text)
and `keys.json` ({role: [SHA-256 of the embedded text, ...]} in row order). A snapshot is a cache, never the
source of truth: on opening, vectors are looked up in the newest snapshot by key, then in the SQLite embedding
cache, then computed. Written to a temporary folder and renamed into place; arrays are loaded memory-mapped with
`allow_pickle=False`.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt

ROLES = ("passage", "phrase", "fact")
Vectors = npt.NDArray[np.float32]
VectorTable = dict[str, tuple[list[str], Vectors]]  # role -> (keys, matrix)


def snapshot_dir(root: Path, generation: int) -> Path:
    return root / "index" / f"g{generation}"


def write_snapshot(root: Path, generation: int, tables: VectorTable) -> None:
    final = snapshot_dir(root, generation)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".g{generation}.", dir=final.parent))
    try:
        for role, (_, matrix) in tables.items():
            np.save(tmp / f"{role}.npy", np.ascontiguousarray(matrix, dtype=np.float32), allow_pickle=False)
        keys = {role: list(k) for role, (k, _) in tables.items()}
        (tmp / "keys.json").write_text(json.dumps(keys), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    remove_other_snapshots(root, generation)


def read_latest_snapshot(root: Path) -> VectorTable:
    """The newest readable snapshot (empty when there is none)."""
    folder = root / "index"
    found = (
        sorted((int(m.group(1)), child) for child in folder.glob("g*") if (m := re.fullmatch(r"g(\d+)", child.name)))
        if folder.exists()
        else []
    )
    for _, child in reversed(found):
        try:
            keys = json.loads((child / "keys.json").read_text(encoding="utf-8"))
            out: VectorTable = {}
            for role in ROLES:
                matrix = np.load(child / f"{role}.npy", mmap_mode="r", allow_pickle=False)
                if matrix.ndim != 2 or len(matrix) != len(keys[role]):
                    raise ValueError("rows and keys disagree")
                out[role] = ([str(k) for k in keys[role]], matrix)
            return out
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return {}


def remove_other_snapshots(root: Path, keep: int) -> None:
    folder = root / "index"
    if not folder.exists():
        return
    for child in folder.iterdir():
        if child.name != f"g{keep}":
            shutil.rmtree(child, ignore_errors=True)
