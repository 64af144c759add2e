"""A batch of queries: PageRank solved as one block of columns against each query on its own.

`rank_full_graph` (engram.retrieve.ranking) solves each query of a batch as a vector. This times, on one memory
in one process, alternately round by round, for the default method's seeds (`default_seeds`) of a batch of
queries:

* block: the batch's resets as one (nodes, queries) matrix in canonical order, each column pushed
  (`engram.graph.push`, on a walk large enough for it), then conjugate gradients on every column the push left
  together until the last one's top is settled (`block_solve`: what `solve_pagerank` did with a matrix and a
  top before 2026-11-29, now each column is solved as a vector), then each column's top k;
* each alone: `rank_full_graph` (each query's reset by its parts, `GraphIndex.seeded_ppr`, then its top k);
* the whole default method on the batch (`hipporag2_default` with every query) against the same queries passed
  one at a time.

It prints milliseconds per query (median of the rounds) and whether both ways rank the same passages.

With `--many N` it does only this instead: `Memory.retrieve` with N queries in one call (the queries repeated
in turn), and prints the time per query and how far the process's peak resident memory rose during the call
(`ru_maxrss`), for what a large batch holds at once.

    .venv/bin/python bench/bench_batch.py --memory DIR [--data ../shared/data/musique-1890] [--rounds 5]
    .venv/bin/python bench/bench_batch.py --memory KEPT/s10000/m --queries KEPT/s10000/queries.json
    .venv/bin/python bench/bench_batch.py --memory KEPT/s100000/m --queries KEPT/s100000/queries.json --many 1000

DIR is a memory indexed from --data (bench_index.py, bench_quality.py or `engram eval --memory DIR` build one),
or a memory kept by `bench_scale.py --keep` with its queries (a JSON list of strings; such a memory is opened
with its own hash embedder).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from engram import Memory
from engram.graph import ppr, push
from engram.graph.certify import TopK
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.default import default_seeds, hipporag2_default
from engram.retrieve.ranking import rank_full_graph
from engram.retrieve.scoring import top_k
from memory_queries import add_memory_arguments, queries_and_embedder

Floats = npt.NDArray[np.float64]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_memory_arguments(parser)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--many", type=int, default=0, help="time one Memory.retrieve call with this many queries")
    args = parser.parse_args()
    questions, embedder = queries_and_embedder(args)
    k = args.k
    with Memory(args.memory, llm=False, embedder=embedder, create=False) as memory:
        if args.many:
            return many(memory, questions, args.many, k)
        context = memory.context()
        index, config = context.view, context.config
        vectors = context.embed_queries(questions)
        seeded = default_seeds(index, vectors, questions, config)
        graph = [qi for qi, reset in enumerate(seeded.resets) if reset is not None]
        resets = [seeded.resets[qi] for qi in graph]
        matrix = np.stack([r.dense(index.n_phrases) for r in resets if r is not None], axis=1)
        walk = index.walk
        print(f"walk: {walk.size:,} nodes, {walk.matrix.nnz:,} non-zeros, {len(walk.chunks.parts)} chunk(s); "
              f"{len(questions)} queries, {len(graph)} with seeds")  # fmt: skip

        def block() -> list[list[int]]:
            masses = block_masses(index, index.canonical_reset(matrix), config.damping, k)
            return [top_k(index.rankable(masses[:, c]), k, index.passage_rank).tolist() for c in range(len(graph))]

        def alone() -> list[list[int]]:
            picked = [seeded.passage_scores[qi] for qi in graph]
            evidence = [seeded.evidence[qi] for qi in graph]
            seeds = [seeded.seeds[qi] for qi in graph]
            ranked = rank_full_graph(index, resets, np.array(picked), seeds, evidence, config.damping, k, "x")
            return [r.rows.tolist() for r in ranked]

        def batched() -> None:
            hipporag2_default(index, vectors, questions, config, k)

        def one_by_one() -> None:
            for i, question in enumerate(questions):
                hipporag2_default(index, vectors[i : i + 1], [question], config, k)

        same = block() == alone()
        runs: dict[str, Callable[[], object]] = {
            "PageRank, one block of columns": block,
            "PageRank, each query alone (rank_full_graph)": alone,
            "hipporag2, the batch in one call": batched,
            "hipporag2, one query per call": one_by_one,
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                times[name].append((time.perf_counter() - start) * 1000 / len(questions))
    for name, samples in times.items():
        print(f"{name}: {statistics.median(samples):.2f} ms per query (median of {args.rounds} rounds)")
    print(f"the block and each query alone rank the same {k} passages for every query: {same}")
    return 0


def block_masses(index: GraphIndex, reset: Floats, damping: float, k: int) -> Floats:
    """The passage rows' masses of a canonical (nodes, queries) reset solved as one block (`block_solve`)."""
    node_rows, n_phrases = index.node_rows, index.n_phrases
    start = int(np.count_nonzero(node_rows < n_phrases))
    solved = block_solve(index.walk, reset / reset.sum(axis=0), damping, TopK(start, k))
    out = np.zeros((len(index.passages), reset.shape[1]))
    out[node_rows[start:] - n_phrases] = solved[start:]
    return out


def block_solve(walk: ppr.SymmetricWalk, r: Floats, damping: float, top: TopK) -> Floats:
    """The block solve as `engram.graph.ppr` ran it for a matrix with a top before each column went alone."""
    budget = push.PUSH_BUDGET if walk.matrix.nnz >= push.MIN_NONZEROS else 0.0
    if not budget:
        return ppr._solve(walk, r, damping, ppr.PPR_TOL, 200, top)
    pushes = [push.push_top(walk, r[:, c], damping, top, budget) for c in range(r.shape[1])]
    out = np.empty_like(r)
    left = [c for c, pushed in enumerate(pushes) if pushed.masses is None]
    for c, pushed in enumerate(pushes):
        if pushed.masses is not None:
            out[:, c] = pushed.masses
    if left:
        start = (np.stack([pushes[c].y for c in left], axis=1), np.stack([pushes[c].residual for c in left], axis=1))
        out[:, left] = ppr._solve(walk, r[:, left], damping, ppr.PPR_TOL, 200, top, start)
    return out


def many(memory: Memory, questions: list[str], count: int, k: int) -> int:
    """One `Memory.retrieve` call with `count` queries: time per query and the rise of the peak RSS."""
    batch = [questions[i % len(questions)] for i in range(count)]
    memory.retrieve(batch[:1], k)  # the view and its caches, before the peak is read
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    found = memory.retrieve(batch, k)
    seconds = time.perf_counter() - start
    rise = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # KiB on Linux
    print(f"Memory.retrieve with {count} queries in one call: {seconds * 1000 / count:.2f} ms per query, "
          f"peak RSS rose by {rise:.0f} MiB (from {before / 1024:.0f} MiB); {len(found)} results")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
