"""RAPTOR's clustering alone (`raptor.cluster.cluster_points`) on the shared MuSiQue passages, timed, beside the
same function from an earlier commit: the clusters must be the same (a digest of them is printed) and the time
says what a change saved. The vectors are the hash embedder's of the passage texts; tokens are estimated. UMAP's
numba code is compiled before timing; the two versions alternate, `--rounds` times each.

    .venv/bin/python bench/bench_raptor_cluster.py [--passages 1890] [--before b2b97aa] [--rounds 2]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "musique-1890" / "corpus.jsonl"
MODULE = "src/engram/retrieve/peers/raptor/cluster.py"
MODULE_BEFORE = "src/engram/retrieve/peers/raptor_cluster.py"  # its path in commits before peers had packages


def module_at(commit: str, folder: Path) -> ModuleType:
    """`raptor.cluster` as it was at `commit` (git show), imported under another name."""
    shown = subprocess.run(["git", "show", f"{commit}:{MODULE}"], cwd=ROOT, capture_output=True)
    if shown.returncode != 0:
        shown = subprocess.run(["git", "show", f"{commit}:{MODULE_BEFORE}"], cwd=ROOT, check=True, capture_output=True)
    text = shown.stdout
    path = folder / "raptor_cluster_before.py"
    path.write_bytes(text)
    spec = importlib.util.spec_from_file_location("raptor_cluster_before", path)
    assert spec is not None and spec.loader is not None
    found = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = found  # dataclasses look their module up by name
    spec.loader.exec_module(found)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1890)
    parser.add_argument("--before", default="b2b97aa", help="the commit whose cluster_points runs beside today's")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from engram.embed import HashEmbedder
    from engram.retrieve.peers.raptor import cluster as raptor_cluster
    from engram.tokens import estimate_tokens

    rows = [json.loads(line) for line in CORPUS.open(encoding="utf-8")][: args.passages]
    points = HashEmbedder().embed([str(r["text"]) for r in rows])
    tokens = [estimate_tokens(str(r["text"])) for r in rows]
    with tempfile.TemporaryDirectory() as folder:
        before = module_at(args.before, Path(folder))
        raptor_cluster.reduce(points[:40], 6, raptor_cluster.Clustering())  # numba compiles here, untimed
        for _ in range(args.rounds):
            for label, mod in ((args.before, before), ("now", raptor_cluster)):
                start = time.perf_counter()
                found = mod.cluster_points(points, tokens, mod.Clustering())
                digest = hashlib.sha256(json.dumps(found).encode()).hexdigest()[:12]
                print(f"{label}: {time.perf_counter() - start:.1f} s, {len(found)} clusters, digest {digest}")


if __name__ == "__main__":
    main()
