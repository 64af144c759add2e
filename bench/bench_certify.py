"""Certified top k (issue 11): the default method's PageRank solve stopped as soon as the top k passages are
certain (engram.graph.certify), against the same solve run to its tolerance (1e-10), on the same reset vectors.

    .venv/bin/python bench/bench_certify.py DIR/engram-bench-scale-xxxx/s100000 [--queries 20] [--ks 5,10,20]
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_certify.py --musique /tmp/q13/m [--ks 5,10,20,40]

The first form reads a memory kept by `bench_scale.py --keep DIR` (hash embedder, the benchmark's queries);
the second the shared MuSiQue memory (MiniLM, the 50 shared questions; built on first use as in
bench_quality.py). In one process, query by query, alternately: `GraphIndex.ppr` without and with `top=k`
(time, and sparse products counted on a one-chunk copy of the walk), whether the top k passages (ranked with
the retrieval's tie-break) are the same, and the largest relative difference of their masses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from engram import Memory
from engram.eval.data import load_corpus, load_questions
from engram.graph.certify import TopK
from engram.index.view import GraphIndex
from engram.retrieve.default import default_seeds
from engram.retrieve.scoring import top_k

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_query_parts import counted
from bench_scale import QueryCache

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def compare(index: GraphIndex, resets: list[np.ndarray], ks: list[int]) -> None:
    n = index.n_phrases
    start = len(index.node_rows) - int(np.count_nonzero(index.node_rows >= n))
    print(f"{len(index.node_rows):,} nodes, {index.walk.matrix.nnz:,} non-zeros, {len(resets)} queries")
    print("| k | same top k | full solve p50 (ms) | certified p50 (ms) | products full (median) | products "
          "certified (median, max) | largest relative difference of a top-k mass |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for k in ks:
        full_t, top_t, full_n, top_n, same, worst = [], [], [], [], 0, 0.0
        for reset in resets:
            t0 = time.perf_counter()
            full = index.ppr(reset, 0.5)
            t1 = time.perf_counter()
            fast = index.ppr(reset, 0.5, top=k)
            t2 = time.perf_counter()
            full_t.append(t1 - t0)
            top_t.append(t2 - t1)
            canonical = reset[index.node_rows]
            full_n.append(counted(index.walk, canonical))
            top_n.append(counted(index.walk, canonical, TopK(start, k)))
            want = top_k(index.rankable(full[n:]), k, index.passage_rank)
            got = top_k(index.rankable(fast[n:]), k, index.passage_rank)
            same += int(np.array_equal(want, got))
            worst = max(worst, float(np.max(np.abs(fast[n:][want] - full[n:][want]) / full[n:][want])))
        print(f"| {k} | {same}/{len(resets)} | {statistics.median(full_t) * 1e3:.1f} | "
              f"{statistics.median(top_t) * 1e3:.1f} | {statistics.median(full_n):.0f} | "
              f"{statistics.median(top_n):.0f}, {max(top_n)} | {worst:.1e} |")  # fmt: skip
    print(f"5-minute load average on {os.cpu_count()} cores: {os.getloadavg()[1]:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, nargs="?", help="a bench_scale.py memory folder (holds m/, queries.json)")
    parser.add_argument("--musique", type=Path, help="the shared MuSiQue memory instead (built on first use)")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--ks", default="5,10,20")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    if args.musique is not None:
        if not (DATA / "corpus.jsonl").exists():
            print(f"no data at {DATA}", file=sys.stderr)
            return 2
        queries = [q.question for q in load_questions(DATA / "questions.jsonl")][: args.queries]
        memory = Memory(args.musique, llm=False)
        if not memory.context().view.passage_alive.any():
            memory.index(load_corpus(DATA / "corpus.jsonl"), extractions=DATA / "openie-gpt-3.5-turbo-1106.jsonl")
    elif args.folder is not None:
        queries = json.loads((args.folder / "queries.json").read_text())[: args.queries]
        memory = Memory(args.folder / "m", embedder=QueryCache(queries))
    else:
        parser.error("give a bench_scale.py memory folder or --musique DIR")
    with memory:
        ctx = memory.context()
        seeded = default_seeds(ctx.view, ctx.embed_queries(queries), queries, ctx.config)
        compare(ctx.view, [r for r in seeded.resets if r is not None], ks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
