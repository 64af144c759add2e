"""Where a directory memory's disk goes: bytes per passage, per phrase and per fact, by kind of file.

    .venv/bin/python bench/disk_bytes.py MEMORY_DIR [MEMORY_DIR ...]

Reads only the files (no engram import, no open): the rows of each role are the lengths of the newest snapshot's
key files (dead rows included, as the files hold them). Each kind of file is charged to what it stores: the
snapshot's vector files and key files to their role, the phrase ANN index (index/ann/) to phrases, the fact codes
(index/codes/) to facts; engram.sqlite (with its -wal), the saved state (state*) and the saved graph (walk-*) are
per passage. docs/format.md ("Bytes on disk") pastes its output.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROLES = ("passage", "phrase", "fact")
_GENERATION = re.compile(r"g(\d+)")
_VECTORS = re.compile(r"(passage|phrase|fact)(\.\d+)?\.npy")
_KEYS = re.compile(r"(passage|phrase|fact)-keys(\.\d+)?\.(json|bin)")  # JSON lists before, 32-byte digests now


def newest_snapshot(root: Path) -> Path:
    found = [(int(m.group(1)), p) for p in (root / "index").iterdir() if (m := _GENERATION.fullmatch(p.name))]
    if not found:
        raise SystemExit(f"{root}: no snapshot under index/ (close the memory first)")
    return max(found)[1]


def breakdown(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(rows by role, bytes by kind) of the memory at `root`."""
    snapshot = newest_snapshot(root)
    rows = dict.fromkeys(ROLES, 0)
    sizes: dict[str, int] = {}

    def add(kind: str, path: Path) -> None:
        sizes[kind] = sizes.get(kind, 0) + path.stat().st_size

    for path in snapshot.iterdir():
        if m := _VECTORS.fullmatch(path.name):
            add(f"{m.group(1)} vectors", path)
        elif m := _KEYS.fullmatch(path.name):
            add(f"{m.group(1)} keys", path)
            if m.group(3) == "bin":
                rows[m.group(1)] += path.stat().st_size // 32
            else:
                rows[m.group(1)] += len(json.loads(path.read_text(encoding="utf-8")))
        elif path.name.startswith("walk-"):
            add("saved graph", path)
        else:
            add("saved state", path)
    for kind, folder in (("phrase ANN index", root / "index" / "ann"), ("fact codes", root / "index" / "codes")):
        for path in folder.glob("*") if folder.is_dir() else []:
            add(kind, path)
    for path in root.glob("engram.sqlite*"):
        add("engram.sqlite", path)
    return rows, sizes


PER = {"phrase vectors": "phrase", "phrase keys": "phrase", "phrase ANN index": "phrase"}
PER |= {"fact vectors": "fact", "fact keys": "fact", "fact codes": "fact"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("memories", nargs="+", type=Path)
    args = parser.parse_args()
    for root in args.memories:
        rows, sizes = breakdown(root)
        passages = max(rows["passage"], 1)
        print(f"{root}: {rows['passage']:,} passages, {rows['phrase']:,} phrases, {rows['fact']:,} facts (rows)")
        print("| file | bytes per passage | bytes per row of its role |")
        print("|---|---|---|")
        for kind in sorted(sizes, key=lambda k: -sizes[k]):
            role = PER.get(kind, kind.split()[0] if kind.split()[0] in ROLES else "passage")
            print(f"| {kind} | {sizes[kind] / passages:,.0f} | {sizes[kind] / max(rows[role], 1):,.0f} per {role} |")
        total = sum(sizes.values())
        print(f"| total | {total / passages:,.0f} | {total / 1e6:,.1f} MB in all |")
        print()


if __name__ == "__main__":
    main()
