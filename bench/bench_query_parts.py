"""Where one hipporag2 query's time goes on a large memory, and what exact PPR costs per iteration (issue 11).

Runs on a memory kept by `bench_scale.py --keep DIR` (the folder `DIR/<run>/s<size>`, which holds `m/` and
`queries.json`). In one process, so every pair below shares the machine's load, query by query alternately
(BLAS apart, after the others: OpenBLAS's threads spin for a while after a threaded call and slowed whatever
followed it by a core):

* fact scores: BLAS over a canonical-order copy of the alive fact vectors (the code before 891719e) against
  `GraphIndex.fact_scores` (einsum over the shared vectors, in row blocks on a thread pool), and, when the
  view scores facts through 8-bit codes (`graph.fact_codes`), the top 3 facts and the lowest score that way
  (engram.index.state.coded_rows: the same rows and scores), after the first query has encoded them, and the top 3
  alone (`lowest=False`, what the default method asks for: one query's codes scanned in row ranges, one per
  thread);
* PPR: power iteration (`personalized_pagerank` on the walk operator, tolerance 1e-12, the code before
  fb2352b) against `solve_pagerank` (conjugate gradients on the symmetric form), with the number of sparse
  products each needs, and one sparse product on one thread and in row blocks;
* the whole `Memory.retrieve` (query embedding excluded: queries are embedded beforehand);
* a floor under a query's time: the bytes it cannot avoid reading with this method and layout (the 8-bit codes
  of the alive facts, the alive passages' float32 vectors, and the walk matrix's arrays once per sparse product
  of the queries' certified solves as `Memory.retrieve` runs them, counted on their own reset vectors: none
  for a query whose top the forward push settles, engram.graph.push), over the rate at which this machine
  reads memory (a sum over a 512 MiB array, on one thread and in one block per thread at once). The vector work
  of the solve and every other pass come on top, so a query cannot be faster than that here.

With `--copies K` the graph's walk is also repeated K times side by side (block diagonal) as a stand-in for a
memory K times larger, for the per-iteration cost at that size.

    .venv/bin/python bench/bench_query_parts.py DIR/engram-bench-scale-xxxx/s30000 [--queries 10] [--copies 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

import engram.index.view.graph_index as view_module
from engram import Memory
from engram.graph.certify import TopK
from engram.graph.parallel import THREADS, RowChunks, in_parallel, row_blocks
from engram.graph.ppr import SymmetricWalk, dangling_nodes, personalized_pagerank, solve_pagerank, walk_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import QueryCache


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f}"


def counted(
    walk: SymmetricWalk, reset: np.ndarray, top: TopK | None = None, push_budget: float | None = 0.0
) -> int:
    """Sparse products `solve_pagerank` needs (counted on the one-chunk path: the same iterations), stopping at
    `top` when given (engram.graph.certify); by conjugate gradients alone unless a `push_budget` is given, None
    for `solve_pagerank`'s own choice (engram.graph.push: products only for a query whose top the push did not
    settle)."""
    walk = SymmetricWalk(walk.matrix, walk.root, walk.inverse_root, walk.dangling, walk.blocks)
    walk.__dict__["chunks"] = RowChunks([(0, walk.size, walk.matrix)], [range(1)])
    count = [0]
    real = walk.product

    def product(x: np.ndarray) -> np.ndarray:
        count[0] += 1
        return real(x)

    object.__setattr__(walk, "product", product)
    try:
        solve_pagerank(walk, reset, 0.5, top=top, push_budget=push_budget)
    finally:
        object.__delattr__(walk, "product")
    return count[0]


def ppr_parts(label: str, walk: SymmetricWalk, rounds: int) -> None:
    """Power iteration against conjugate gradients on one walk, alternately; a sparse product's cost."""
    n = walk.size
    adjacency = sp.csr_matrix(sp.diags(walk.root) @ walk.matrix @ sp.diags(walk.root))
    operator = walk_operator(adjacency)
    dangling = dangling_nodes(operator)
    reset = np.zeros(n)
    reset[:5] = 1.0
    reset[n - n // 10 :] = 0.01
    x = np.random.default_rng(0).random(n)
    times: dict[str, list[float]] = {k: [] for k in ("power", "cg", "one", "blocks")}
    iterations = [0]

    def power() -> None:
        r = reset / reset.sum()
        p = r.copy()
        for i in range(200):  # personalized_pagerank's loop (damping 0.5, tolerance 1e-12), counted
            nxt = 0.5 * r + 0.5 * (operator @ p + r * p[dangling].sum())
            delta, p = float(np.abs(nxt - p).sum()), nxt
            iterations[0] = i + 1
            if delta < 1e-12:
                break

    steps: list[tuple[str, Callable[[], object]]] = [
        ("power", lambda: personalized_pagerank(operator, reset, 0.5, dangling=dangling)),
        ("cg", lambda: solve_pagerank(walk, reset, 0.5)),
        ("one", lambda: walk.matrix @ x),
        ("blocks", lambda: walk.product(x)),
    ]
    for _ in range(rounds):
        for name, fn in steps:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    power()
    print(f"{label}: {n:,} nodes, {walk.matrix.nnz:,} non-zeros; one sparse product {ms(times['one'])} ms on one "
          f"thread, {ms(times['blocks'])} ms in {len(walk.blocks)} row blocks; PPR power iteration "
          f"{ms(times['power'])} ms ({iterations[0]} products), conjugate gradients {ms(times['cg'])} ms "
          f"({counted(walk, reset)} products)")  # fmt: skip


def read_rate(parts: int) -> float:
    """GB/s at which numpy sums a 512 MiB float64 array, cut into `parts` blocks summed at once (median of 5)."""
    big = np.ones(1 << 26)
    blocks = np.array_split(big, parts)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        in_parallel([partial(np.sum, block) for block in blocks])
        times.append(time.perf_counter() - start)
    return big.nbytes / statistics.median(times) / 1e9


def floor(view: Any, resets: list[tuple[np.ndarray, TopK | None]], retrieve_ms: str) -> None:
    """Print the bytes a query must read (`floor` in the module's docstring) and the time that takes here."""
    walk = view.walk
    products = statistics.median(counted(walk, reset, top, None) for reset, top in resets)  # as retrieve runs them
    codes = int(np.count_nonzero(view.fact_alive)) * view.fact_vectors.shape[1] if view.fact_codes is not None else 0
    passages = int(np.count_nonzero(view.passage_alive)) * view.passage_vectors.shape[1] * 4
    matrix = walk.matrix.data.nbytes + walk.matrix.indices.nbytes + walk.matrix.indptr.nbytes
    total = codes + passages + matrix * products
    one, all_threads = read_rate(1), read_rate(THREADS)
    print(f"floor: a query reads at least {total / 1e6:.0f} MB (fact codes {codes / 1e6:.0f} MB, passage vectors "
          f"{passages / 1e6:.0f} MB, the walk matrix {matrix / 1e6:.0f} MB x {products:g} products, the median of "
          f"{len(resets)} queries' certified solves, the push first); this machine reads {one:.1f} GB/s on one "
          f"thread and {all_threads:.1f} GB/s on {THREADS}: at least {total / all_threads / 1e6:.1f} ms per query, "
          f"against retrieve {retrieve_ms} ms")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--copies", type=int, default=0)
    args = parser.parse_args()
    queries = json.loads((args.folder / "queries.json").read_text())[: args.queries]
    embedder = QueryCache(queries)
    memory = Memory(args.folder / "m", embedder=embedder)
    memory.retrieve(queries[0], top_k=5)
    view = memory._current()
    resets: list[tuple[np.ndarray, TopK | None]] = []  # each query's reset vector and stop, as its solve got them
    solve = view_module.solve_pagerank

    def noted(
        walk: SymmetricWalk, reset: np.ndarray, damping: float, top: TopK | None = None, support: Any = None
    ) -> np.ndarray:
        if len(resets) < len(queries):
            resets.append((np.array(reset), top))
        return solve(walk, reset, damping, top=top, support=support)

    view_module.solve_pagerank = noted  # type: ignore[assignment]
    vectors = np.stack([embedder.cache[q] for q in queries]).astype(np.float32)
    rows = np.flatnonzero(view.fact_alive)
    rows = rows[np.argsort(view.fact_rank[rows], kind="stable")]
    compact = np.ascontiguousarray(view.fact_vectors[rows])
    times: dict[str, list[float]] = {k: [] for k in ("blas", "einsum", "codes", "top", "retrieve")}
    for i, query in enumerate(queries):
        for name, fn in (
            ("einsum", lambda i=i: view.fact_scores(vectors[i : i + 1])),
            ("codes", lambda i=i: view.fact_scores(vectors[i : i + 1], 3)),
            ("top", lambda i=i: view.fact_scores(vectors[i : i + 1], 3, lowest=False)),
            ("retrieve", lambda q=query: memory.retrieve(q, top_k=5)),
        ):
            if name in ("codes", "top") and view.fact_codes is None:
                continue
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    for i in range(len(queries)):  # last: OpenBLAS's threads spin on after a call, taking a core from what follows
        start = time.perf_counter()
        (vectors[i : i + 1] @ compact.T).astype(np.float64)
        times["blas"].append(time.perf_counter() - start)
    codes = (f", top 3 and lowest through 8-bit codes {ms(times['codes'])} ms, top 3 alone {ms(times['top'])} ms"
             if times["codes"] else "")  # fmt: skip
    print(f"{args.folder}: {len(rows):,} facts x {compact.shape[1]}; medians over {len(queries)} queries: fact scores "
          f"BLAS on a canonical copy {ms(times['blas'])} ms, einsum in row blocks {ms(times['einsum'])} ms{codes}; "
          f"retrieve {ms(times['retrieve'])} ms")  # fmt: skip
    view_module.solve_pagerank = solve  # type: ignore[assignment]
    floor(view, resets, ms(times["retrieve"]))
    ppr_parts("graph", view.walk, len(queries))
    if args.copies > 1:
        k = args.copies
        matrix = sp.csr_matrix(sp.block_diag([view.walk.matrix] * k, format="csr"))
        matrix.sort_indices()
        w = view.walk
        tiled = SymmetricWalk(
            matrix, np.tile(w.root, k), np.tile(w.inverse_root, k), np.tile(w.dangling, k), row_blocks(matrix)
        )
        ppr_parts(f"{k} copies side by side", tiled, len(queries))
    print(f"5-minute load average on {os.cpu_count()} cores: {os.getloadavg()[1]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
