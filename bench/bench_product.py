"""One sparse product with a vector on a memory's graph: its rows as stored against its rows sorted by length.

`SymmetricWalk.product` multiplies a vector through the walk's rows as stored or sorted by their number of
entries (`engram.graph.parallel.LengthSorted`: scipy's loop then meets rows of one length in runs), whichever
a trial after `parallel.PLAIN_PRODUCTS` products found faster (`parallel.VectorProducts`); each row's sum is the
same floats either way. This times both forms on one memory's walk in one process, alternately: a product on
its own (the same vector again, the arrays warm), a product after 8 MiB of other memory traffic (as inside a
query, where the fact and passage scans come between solves), and the products the default method's queries
make (`hipporag2`, each query's every product timed), with the products' outputs compared bit for bit; then
which form the walk's own trial keeps.

    .venv/bin/python bench/bench_product.py --memory DIR [--data ../shared/data/musique-1890] [--rounds 5]
    .venv/bin/python bench/bench_product.py --memory KEPT/s10000/m --queries KEPT/s10000/queries.json

DIR is a memory indexed from --data (bench_index.py, bench_quality.py or `engram eval --memory DIR` build one),
or a memory kept by `bench_scale.py --keep` with its queries (a JSON list of strings; such a memory is opened
with its own hash embedder).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import engram.graph.ppr as ppr
from engram import Memory
from engram.graph import parallel
from engram.graph.parallel import length_sorted, matvec
from engram.retrieve.default import hipporag2_default
from memory_queries import add_memory_arguments, queries_and_embedder

Product = Callable[[ppr.SymmetricWalk, np.ndarray], np.ndarray]


def plain(walk: ppr.SymmetricWalk, x: np.ndarray) -> np.ndarray:
    return matvec(walk.blocks, x)


def by_length(walk: ppr.SymmetricWalk, x: np.ndarray) -> np.ndarray:
    sorted_rows = walk.__dict__.get("_bench_sorted")
    if sorted_rows is None:
        sorted_rows = walk.__dict__["_bench_sorted"] = [(a, b, length_sorted(m)) for a, b, m in walk.blocks]
    return matvec(sorted_rows, x)


def alone(walk: ppr.SymmetricWalk, product: Product, flush: np.ndarray | None, repeat: int = 200) -> float:
    """Median seconds of one product (after touching `flush`, when given)."""
    x = np.random.default_rng(0).random(walk.size)
    times = []
    for _ in range(repeat):
        if flush is not None:
            flush += 1.0
        start = time.perf_counter()
        product(walk, x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_memory_arguments(parser)
    args = parser.parse_args()
    questions, embedder = queries_and_embedder(args)
    modes: dict[str, Product] = {"as stored": plain, "sorted by length": by_length}
    inside: dict[str, list[float]] = {name: [] for name in modes}
    solo: dict[str, list[float]] = {f"{name}{kind}": [] for name in modes for kind in ("", " (flushed)")}
    with Memory(args.memory, llm=False, embedder=embedder) as memory:
        context = memory.context()
        index, config = context.view, context.config
        vectors = context.embed_queries(questions)
        walk = index.walk
        x = np.random.default_rng(1).random(walk.size)
        same = np.array_equal(plain(walk, x), by_length(walk, x))
        print(f"walk: {walk.size:,} nodes, {walk.matrix.nnz:,} non-zeros, {len(walk.blocks)} row block(s); "
              f"the two forms' products equal bit for bit: {same}")  # fmt: skip
        flush = np.ones(1 << 20)
        real = ppr.SymmetricWalk.product
        for _ in range(args.rounds):
            for name, product in modes.items():
                solo[name].append(alone(walk, product, None))
                solo[f"{name} (flushed)"].append(alone(walk, product, flush))
                timed = inside[name]

                def counting(
                    self: ppr.SymmetricWalk, v: np.ndarray, product: Product = product, timed: list[float] = timed
                ) -> np.ndarray:
                    start = time.perf_counter()
                    out = product(self, v) if v.ndim == 1 else plain(self, v)
                    timed.append(time.perf_counter() - start)
                    return out

                ppr.SymmetricWalk.product = counting  # type: ignore[method-assign,assignment]
                for i, question in enumerate(questions):
                    hipporag2_default(index, vectors[i : i + 1], [question], config, 10)
        ppr.SymmetricWalk.product = real  # type: ignore[method-assign]
        trial = parallel.VectorProducts(walk.blocks)
        for _ in range(parallel.PLAIN_PRODUCTS + 1):
            trial(x)
        assert trial.chosen is not None or len(walk.blocks) > 1
        kept = (
            "none (more than one row block)"
            if trial.chosen is None
            else ("sorted by length" if isinstance(trial.chosen[0][2], parallel.LengthSorted) else "as stored")
        )
    for name, samples in solo.items():
        print(f"one product, {name}: median of rounds {statistics.median(samples) * 1e6:.1f} us")
    for name, samples in inside.items():
        print(f"products inside hipporag2 queries, {name}: {len(samples)} products, median "
              f"{statistics.median(samples) * 1e6:.1f} us, mean {statistics.mean(samples) * 1e6:.1f} us")  # fmt: skip
    print(f"the walk's own trial ({parallel.TRIALS} products each way) keeps its rows: {kept}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
