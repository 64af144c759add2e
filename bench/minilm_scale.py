"""Approximate against exact search on real sentence vectors: the scale benchmark's corpus embedded with
all-MiniLM-L6-v2 (issue 54), where `bench_scale.py` uses hash vectors (near-random in 384 dimensions, the worst
case for any approximate index, and unlike the clusters real embeddings form).

Builds (or reuses) a memory of the first `--size` passages of `scale_corpus.py`'s corpus (seed 100000, so a
smaller memory is a prefix of the 100k one and shares its cached vectors) with imported extractions and the
default embedder behind `vector_cache.CachedEmbedder`: every vector is kept on disk, so a stopped run loses
nothing and the next one embeds only the rest. Prints the embedding rate per role (texts per second, of the
texts the model embedded in this run), then for the memory's facts and for its passages, on 50 corpus
questions (`Corpus.queries`), what an IVF partition's probed cells and an HNSW graph hold of each query's exact
top 5 (`bench_fact_ann.py`'s tables). With --memory and --questions it measures another MiniLM memory
instead (the shared MuSiQue one), the same way.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/minilm_scale.py --size 10000 [--cache DIR] [--threads 1]
    HF_HUB_OFFLINE=1 .venv/bin/python bench/minilm_scale.py --memory M \
        --questions ../shared/data/musique-1890/questions.jsonl

Embedding the 100k memory (100k passages, about 0.9M facts and 0.9M phrases) takes hours on this machine's two
cores; run it in the background and come back: it resumes where it stopped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fact_ann import BLOCK, TOP, hnsw, ivf
from engram import Memory
from engram.eval.data import load_questions
from scale_corpus import Corpus
from vector_cache import CachedEmbedder, default_folder

SEED = 100_000
QUERIES = 50
Array = npt.NDArray[np.float32]


def build(size: int, path: Path, embedder: CachedEmbedder, batch: int) -> None:
    """Index the first `size` passages of the corpus into `path` (what it holds already is skipped)."""
    corpus = Corpus(seed=SEED)
    with Memory(path, embedder=embedder, llm=False) as memory:
        start = time.perf_counter()
        for docs, extractions in corpus.batches(size, batch):
            memory.index(docs, extractions=extractions)
            rates = ", ".join(f"{r} {embedder.embedded[r]:,} in {embedder.seconds[r]:.0f} s" for r in embedder.seconds)
            print(f"[{size}] {corpus.made:,} passages, {time.perf_counter() - start:.0f} s ({rates or 'all cached'})",
                  file=sys.stderr, flush=True)  # fmt: skip


def questions_of(size: int) -> list[str]:
    corpus = Corpus(seed=SEED)
    for _ in corpus.batches(size, 50_000):
        pass
    return corpus.queries(QUERIES)


def rows_of(memory: Memory, kind: str) -> Array:
    """The alive rows of the memory's fact or passage vectors, in RAM."""
    view = memory.context().view
    if kind == "facts":
        alive, vectors = view.fact_alive, view.fact_vectors
    else:
        alive, vectors = view.passage_alive, view.passage_vectors
    rows = np.flatnonzero(alive)
    parts = [np.asarray(vectors[rows[i : i + BLOCK]]) for i in range(0, len(rows), BLOCK)]
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def tables(label: str, rows: Array, queries: Array, probes: list[int], efs: list[int]) -> None:
    exact = np.concatenate([queries @ rows[i : i + BLOCK].T for i in range(0, len(rows), BLOCK)], axis=1)
    best = np.argsort(-exact, axis=1, kind="stable")[:, :TOP]
    at = np.arange(len(queries))
    print(f"\n{label}: {len(rows):,} alive rows x {rows.shape[1]}, {len(queries)} queries; median cosine of the best "
          f"{float(np.median(exact[at, best[:, 0]])):.3f}, of the 5th {float(np.median(exact[at, best[:, -1]])):.3f},"
          f" of all {float(np.median(exact)):.3f}")  # fmt: skip
    nlist = 1 << max(1, round(np.log2(np.sqrt(len(rows)))))
    ivf(rows, queries, best, nlist, probes)
    hnsw(rows, queries, best, 16, 40, efs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000, help="passages of the scale corpus")
    parser.add_argument("--cache", type=Path, default=default_folder(), help="the vector cache and memories")
    parser.add_argument("--batch", type=int, default=5_000, help="passages per index() call")
    parser.add_argument("--threads", type=int, default=0, help="torch threads for the model (0: its default)")
    parser.add_argument("--memory", type=Path, help="measure this MiniLM memory instead (with --questions)")
    parser.add_argument("--questions", type=Path, help="questions.jsonl for --memory")
    parser.add_argument("--build-only", action="store_true", help="embed and build, print no tables")
    parser.add_argument("--nprobe", default="8,16,32,64,128,256")
    parser.add_argument("--ef", default="32,64,128,256")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    embedder = CachedEmbedder(args.cache)
    print(f"vector cache {embedder.folder}: {len(embedder):,} vectors", file=sys.stderr)
    if args.memory:
        if not args.questions:
            parser.error("--memory needs --questions")
        path, texts = args.memory, [q.question for q in load_questions(args.questions)]
    else:
        path = args.cache / f"scale-{args.size}.engram"
        build(args.size, path, embedder, args.batch)
        for role in embedder.seconds:
            rate = embedder.embedded[role] / max(embedder.seconds[role], 1e-9)
            print(f"embedded {embedder.embedded[role]:,} {role} texts in {embedder.seconds[role]:.0f} s: {rate:.0f}/s")
        texts = questions_of(args.size)
    if args.build_only:
        return 0
    with Memory(path, embedder=embedder, llm=False) as memory:
        queries = np.asarray(memory.context().embed(texts, "query"), dtype=np.float32)
        probes, efs = [int(x) for x in args.nprobe.split(",")], [int(x) for x in args.ef.split(",")]
        for kind in ("facts", "passages"):
            tables(f"{path.name}, {kind}", rows_of(memory, kind), queries, probes, efs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
