"""Could a large memory's top facts come from an approximate index instead of the exact scan (issue 11)?

The default method reads only a query's best facts, yet finding them exactly scans every fact's 8-bit code
(engram.index.state.coded_rows): 345 MB per query at 0.9M facts, the largest share of a 100k-passage query. An
approximate index would read far less. This measures, on a memory's own fact vectors and queries, what two would keep:

* an IVF partition: faiss k-means (spherical, `--nlist` cells trained on up to 64 sampled facts per cell), every
  fact in the cell of its nearest centre; a query scans the facts of its `--nprobe` nearest cells. Printed: the
  share of the exact top 5 facts those cells hold, whether they hold the best fact, and the share of facts read;
* an HNSW graph (faiss, 8-bit scalar-quantised copies, `--hnsw M,efConstruction`): its build time over every
  fact, and for each `--ef` the share of the exact top 5 among its 20 results, the best fact's, and the time.

The exact top 5 rank the float32 dots (BLAS) of the query with every alive fact. Each share is a mean over the
queries. Embedding the queries is not timed.

    .venv/bin/python bench/bench_fact_ann.py --kept KEPT/engram-bench-scale-xxxx/s100000
    .venv/bin/python bench/bench_fact_ann.py --memory /tmp/musique.engram \
        --questions ../shared/data/musique-1890/questions.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from engram import Memory
from engram.eval.data import load_questions
from engram.graph.ann import library

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import QueryCache

TOP = 5
BLOCK = 32_768  # fact rows read at a time


def load(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, str]:
    """(alive fact vectors in RAM, query vectors, label)."""
    if args.kept:
        queries = json.loads((args.kept / "queries.json").read_text())
        memory, label = Memory(args.kept / "m", embedder=QueryCache(queries)), str(args.kept)
    else:
        queries = [q.question for q in load_questions(args.questions)]
        memory, label = Memory(args.memory), str(args.memory)
    with memory:
        context = memory.context()
        view = context.view
        rows = np.flatnonzero(view.fact_alive)
        facts = np.concatenate([np.asarray(view.fact_vectors[rows[i : i + BLOCK]]) for i in range(0, len(rows), BLOCK)])
        vectors = np.asarray(context.embed(queries, "query"), dtype=np.float32)
    return np.ascontiguousarray(facts, dtype=np.float32), vectors, label


def shares(found: list[np.ndarray], best: np.ndarray) -> tuple[float, float]:
    """Mean share of each query's exact top found, and share of queries whose best is found."""
    top5 = float(np.mean([np.isin(b, f).mean() for f, b in zip(found, best)]))
    top1 = float(np.mean([b[0] in f for f, b in zip(found, best)]))
    return top5, top1


def partition(facts: np.ndarray, nlist: int) -> tuple[np.ndarray, np.ndarray]:
    """The IVF partition: (`nlist` spherical k-means centres trained on up to 64 sampled rows per cell, the cell
    of each row: its nearest centre)."""
    faiss = library()
    rng = np.random.default_rng(0)
    sample = facts[np.sort(rng.choice(len(facts), min(len(facts), 64 * nlist), replace=False))]
    kmeans = faiss.Kmeans(facts.shape[1], nlist, niter=10, seed=1, spherical=True, max_points_per_centroid=64)
    kmeans.train(sample)
    centres = kmeans.centroids.astype(np.float32)
    cell = np.concatenate([np.argmax(facts[i : i + BLOCK] @ centres.T, axis=1) for i in range(0, len(facts), BLOCK)])
    return centres, cell


def ivf(facts: np.ndarray, queries: np.ndarray, best: np.ndarray, nlist: int, probes: list[int]) -> None:
    start = time.perf_counter()
    centres, cell = partition(facts, nlist)
    print(f"IVF {nlist} cells: trained and assigned in {time.perf_counter() - start:.1f} s; largest cell "
          f"{int(np.bincount(cell, minlength=nlist).max()):,} facts")
    print("| cells probed | top 5 held | best held | facts read |")
    print("|---|---|---|---|")
    order = np.argsort(-(queries @ centres.T), axis=1)
    for nprobe in probes:
        if nprobe > nlist:
            continue
        found, read = [], []
        for qi in range(len(queries)):
            probed = np.zeros(nlist, dtype=bool)
            probed[order[qi, :nprobe]] = True
            inside = probed[cell]
            found.append(np.flatnonzero(inside))
            read.append(inside.mean())
        top5, top1 = shares(found, best)
        print(f"| {nprobe} | {top5:.3f} | {top1:.3f} | {100 * float(np.mean(read)):.2f} % |")


def hnsw(facts: np.ndarray, queries: np.ndarray, best: np.ndarray, m: int, efc: int, efs: list[int]) -> None:
    faiss = library()
    index = faiss.IndexHNSWSQ(facts.shape[1], faiss.ScalarQuantizer.QT_8bit, m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = efc
    start = time.perf_counter()
    index.train(facts[: min(len(facts), 200_000)])
    for i in range(0, len(facts), BLOCK):
        index.add(facts[i : i + BLOCK])
    print(f"HNSW M {m} efConstruction {efc}: built in {time.perf_counter() - start:.1f} s")
    print("| efSearch | top 5 among 20 results | best among them | ms per query |")
    print("|---|---|---|---|")
    for ef in efs:
        index.hnsw.efSearch = ef
        start = time.perf_counter()
        _, ids = index.search(queries, 20)
        elapsed = (time.perf_counter() - start) / len(queries) * 1000
        top5, top1 = shares(list(ids), best)
        print(f"| {ef} | {top5:.3f} | {top1:.3f} | {elapsed:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kept", type=Path, help="a bench_scale.py --keep memory folder (m/ and queries.json)")
    source.add_argument("--memory", type=Path, help="a memory folder; its questions from --questions")
    parser.add_argument("--questions", type=Path, help="questions.jsonl for --memory")
    parser.add_argument("--nlist", type=int, default=0, help="IVF cells (default: sqrt(facts), a power of 2)")
    parser.add_argument("--nprobe", default="8,16,32,64,128,256")
    parser.add_argument("--hnsw", default="16,40", help="M,efConstruction ('' skips the graph)")
    parser.add_argument("--ef", default="32,64,128,256")
    args = parser.parse_args()
    if args.memory and not args.questions:
        parser.error("--memory needs --questions")
    facts, queries, label = load(args)
    exact = np.concatenate([queries @ facts[i : i + BLOCK].T for i in range(0, len(facts), BLOCK)], axis=1)
    best = np.argsort(-exact, axis=1, kind="stable")[:, :TOP]
    print(f"{label}: {len(facts):,} alive facts x {facts.shape[1]}, {len(queries)} queries; median cosine of the "
          f"best fact {float(np.median(exact[np.arange(len(queries)), best[:, 0]])):.3f}, of the 5th "
          f"{float(np.median(exact[np.arange(len(queries)), best[:, -1]])):.3f}, of all facts "
          f"{float(np.median(exact)):.3f}")
    nlist = args.nlist or 1 << max(1, round(np.log2(np.sqrt(len(facts)))))
    ivf(facts, queries, best, nlist, [int(x) for x in args.nprobe.split(",")])
    if args.hnsw:
        m, efc = (int(x) for x in args.hnsw.split(","))
        hnsw(facts, queries, best, m, efc, [int(x) for x in args.ef.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
