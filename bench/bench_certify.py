"""Certified top k (issue 11): the default method's PageRank solve stopped as soon as the top k passages are
certain (engram.graph.certify), against the same solve run to its tolerance (1e-10), on the same reset vectors.

    .venv/bin/python bench/bench_certify.py DIR/engram-bench-scale-xxxx/s100000 [--queries 20] [--ks 5,10,20]
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_certify.py --musique /tmp/q13/m [--ks 5,10,20,40]
    .venv/bin/python bench/bench_certify.py DIR/.../s100000 --queries 50 --ks 5 --budgets 0.05,0.1,0.2,0.4

The first form reads a memory kept by `bench_scale.py --keep DIR` (hash embedder, the benchmark's queries);
the second the shared MuSiQue memory (MiniLM, the 50 shared questions; built on first use as in
bench_quality.py). In one process, query by query, alternately, on the view's canonical walk: the solve to its
tolerance, the conjugate-gradient solve stopped once the top k are settled (`push_budget=0`), and the default
(a certified forward push, engram.graph.push, then conjugate gradients from there if the push did not settle
the top):
time, sparse products (counted on a one-chunk copy of the walk, with conjugate gradients alone), how many
queries the push settled alone and the entries it touched, whether the top k passages are the full solve's,
and the largest relative difference of their masses (either stopped solve).

With `--budgets`, the default's solve (push, then conjugate gradients if unsettled) again for each push budget
(entries the push may touch, as a fraction of the walk's non-zeros; `push.PUSH_BUDGET` is the library's), per k:
the queries the push settled alone, time p50, p90, largest and mean (a query the push leaves unsettled pays for
conjugate gradients after it, so the tail moves with the budget), and whether the top k are the full solve's.
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
from engram.graph.ppr import solve_pagerank
from engram.graph.push import MIN_NONZEROS, PUSH_BUDGET, push_top
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.default import default_seeds
from engram.retrieve.scoring import top_k

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_query_parts import counted
from bench_scale import QueryCache

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def passage_start(index: GraphIndex) -> int:
    """The first passage node of the view's canonical walk (its alive phrases come first)."""
    return len(index.node_rows) - int(np.count_nonzero(index.node_rows >= index.n_phrases))


def compare(index: GraphIndex, resets: list[np.ndarray], ks: list[int]) -> None:
    start = passage_start(index)
    walk = index.walk
    cg_only = f"solves by conjugate gradients alone (< {MIN_NONZEROS:,})"
    pushes = "pushes first" if walk.matrix.nnz >= MIN_NONZEROS else cg_only
    print(f"{len(index.node_rows):,} nodes, {walk.matrix.nnz:,} non-zeros, {len(resets)} queries; the default {pushes}")
    print("| k | same top k (conjugate gradients / push) | full solve p50 (ms) | conjugate gradients stopped p50 "
          "(ms) | push, then conjugate gradients if unsettled, p50 (ms) | products full (median) | products stopped "
          "(median, max) | settled by the push alone | entries pushed (median, max) | largest relative difference "
          "of a top-k mass |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in ks:
        top = TopK(start, k)
        times: dict[str, list[float]] = {"full": [], "cg": [], "push": []}
        full_n, top_n, same_cg, same_push, alone, pushed_work, worst = [], [], 0, 0, 0, [], 0.0
        for reset in resets:
            canonical = reset[index.node_rows] / reset.sum()
            t0 = time.perf_counter()
            full = solve_pagerank(walk, canonical, 0.5)
            t1 = time.perf_counter()
            stopped = solve_pagerank(walk, canonical, 0.5, top=top, push_budget=0)
            t2 = time.perf_counter()
            pushed = solve_pagerank(walk, canonical, 0.5, top=top, push_budget=PUSH_BUDGET)
            t3 = time.perf_counter()
            for key, seconds in zip(("full", "cg", "push"), (t1 - t0, t2 - t1, t3 - t2)):
                times[key].append(seconds)
            full_n.append(counted(walk, canonical))
            top_n.append(counted(walk, canonical, top))
            alone_run = push_top(walk, canonical, 0.5, top)
            alone += int(alone_run.masses is not None)
            pushed_work.append(alone_run.work)
            want = top_k(full[start:], k)
            same_cg += int(np.array_equal(top_k(stopped[start:], k), want))
            same_push += int(np.array_equal(top_k(pushed[start:], k), want))
            for got in (stopped, pushed):
                worst = max(worst, float(np.max(np.abs(got[start:][want] - full[start:][want]) / full[start:][want])))
        p50 = {key: statistics.median(v) * 1e3 for key, v in times.items()}
        q = len(resets)
        print(f"| {k} | {same_cg}/{q} / {same_push}/{q} | {p50['full']:.1f} | {p50['cg']:.1f} | {p50['push']:.1f} | "
              f"{statistics.median(full_n):.0f} | {statistics.median(top_n):.0f}, {max(top_n)} | {alone}/{q} | "
              f"{statistics.median(pushed_work):,.0f}, {max(pushed_work):,} | {worst:.1e} |")  # fmt: skip
    print(f"5-minute load average on {os.cpu_count()} cores: {os.getloadavg()[1]:.1f}")


def budgets(index: GraphIndex, resets: list[np.ndarray], ks: list[int], fractions: list[float]) -> None:
    """The default's solve at each push budget, alternately query by query (the same load for every budget)."""
    start = passage_start(index)
    walk = index.walk
    print("| k | push budget | settled by the push alone | same top k | p50 (ms) | p90 (ms) | largest (ms) "
          "| mean (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in ks:
        top = TopK(start, k)
        times: dict[float, list[float]] = {b: [] for b in fractions}
        alone = dict.fromkeys(fractions, 0)
        same = dict.fromkeys(fractions, 0)
        for reset in resets:
            canonical = reset[index.node_rows] / reset.sum()
            want = top_k(solve_pagerank(walk, canonical, 0.5)[start:], k)
            for budget in fractions:
                t0 = time.perf_counter()
                got = solve_pagerank(walk, canonical, 0.5, top=top, push_budget=budget)
                times[budget].append(time.perf_counter() - t0)
                same[budget] += int(np.array_equal(top_k(got[start:], k), want))
                alone[budget] += int(push_top(walk, canonical, 0.5, top, budget).masses is not None)
        q = len(resets)
        for budget in fractions:
            ms = sorted(t * 1e3 for t in times[budget])
            p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
            print(f"| {k} | {budget:g} | {alone[budget]}/{q} | {same[budget]}/{q} | {statistics.median(ms):.1f} | "
                  f"{p90:.1f} | {ms[-1]:.1f} | {statistics.fmean(ms):.1f} |")
    print(f"5-minute load average on {os.cpu_count()} cores: {os.getloadavg()[1]:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, nargs="?", help="a bench_scale.py memory folder (holds m/, queries.json)")
    parser.add_argument("--musique", type=Path, help="the shared MuSiQue memory instead (built on first use)")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--ks", default="5,10,20")
    parser.add_argument("--budgets", help="push budgets to compare (comma-separated fractions of the non-zeros)")
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
        resets = [r.dense(ctx.view.n_phrases) for r in seeded.resets if r is not None]
        if args.budgets:
            budgets(ctx.view, resets, ks, [float(b) for b in args.budgets.split(",")])
        else:
            compare(ctx.view, resets, ks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
