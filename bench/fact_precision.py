"""What a query's exact fact search costs over packed 8-bit fact rows (graph.vector_precision "int8", the
default) against float16 rows scored through their separate 8-bit codes (the "float16" precision), in one run.

Builds `--rows` unit vectors of 384 dimensions (clustered, as real sentence embeddings are: 64 centres), stores
them both ways (engram.index.state.rows.Rows), and times `CodedRows.extremes` (the top 5 facts, without the
lowest score, as the default method asks) for `--queries` queries near the rows, after one warm-up query each
(the float16 table's first search encodes its codes; the packed rows are their own). Prints the median and p90
per query, the bytes each table keeps, and whether both return the same top rows.

    .venv/bin/python bench/fact_precision.py [--rows 900000] [--queries 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from engram.index.state.coded_rows import CodedRows, available
from engram.index.state.rows import Rows
from engram.retrieve.scoring import top_k


def clustered(count: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(64, dim)).astype(np.float32)
    out = np.empty((count, dim), dtype=np.float32)
    for start in range(0, count, 65_536):  # a slice at a time: no float64 copy of the whole table
        n = min(65_536, count - start)
        x = centres[rng.integers(0, 64, n)] + np.float32(0.6) * rng.normal(size=(n, dim)).astype(np.float32)
        out[start : start + n] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=900_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    if not available():
        print("the ann extra (simsimd) is not installed: nothing to measure", file=sys.stderr)
        return 2
    rows = clustered(args.rows, 384, seed=1)
    queries = clustered(args.queries, 384, seed=2)
    alive = np.ones(args.rows, dtype=bool)
    tables = {}
    for name, dtype in (("packed int8 rows", np.int8), ("float16 rows + 8-bit codes", np.float16)):
        table = Rows(384, dtype)
        table.append(rows)
        tables[name] = table
    del rows
    found: dict[str, list[list[int]]] = {}
    print(f"{args.rows:,} fact rows, {args.queries} queries, top {args.top}\n")
    print("| fact rows | median ms per query | p90 ms | bytes kept per row (table + codes) |")
    print("|---|---|---|---|")
    for name, table in tables.items():
        codes = CodedRows(table)
        view = table.view()
        codes.extremes(view, alive, queries[0], args.top, lowest=False)  # encodes the float16 table's codes
        times, tops = [], []
        for query in queries:
            start = time.perf_counter()
            scores = codes.extremes(view, alive, query, args.top, lowest=False)
            times.append(1000 * (time.perf_counter() - start))
            tops.append(top_k(scores, args.top).tolist())
        found[name] = tops
        kept = table.width * table.dtype.itemsize + (codes.dim if codes.encoded else 0)
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        print(f"| {name} | {statistics.median(times):.1f} | {p90:.1f} | {kept} |")
    same = sum(a == b for a, b in zip(*found.values()))
    print(f"\nthe same top {args.top} rows for {same} of {args.queries} queries (the stored values differ)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
