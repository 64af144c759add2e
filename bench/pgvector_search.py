"""Could a PostgreSQL query worker search facts and passages through pgvector instead of holding them (issue 54)?

A PostgreSQL memory's process reads every vector into RAM at open today. A worker that searched the server's own
vector indexes would keep only the graph. This measures pgvector's two indexes on a MiniLM memory's fact and
passage vectors (the vectors engram would store) and its questions: each table `(id, v vector(dim))` is loaded
with binary COPY, then for HNSW (m, ef_construction) and IVFFlat (lists) the index's build time and size, and
for each search width (`hnsw.ef_search`, `ivfflat.probes`) the query time (p50 over the questions, one query at
a time, `ORDER BY v <#> q LIMIT 20`: negative inner product, the vectors are unit length) and the share of each
question's exact top 5 (float32 dot products in numpy) among the 20 returned (which a worker would re-score
exactly from the returned vectors). The exact scan on the server (no index) is timed too.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/pgvector_search.py --memory ~/.cache/engram-bench/minilm/scale-10000.engram
    HF_HUB_OFFLINE=1 .venv/bin/python bench/pgvector_search.py --memory MUSIQUE --questions QUESTIONS.jsonl

Without `--url`, PostgreSQL 16 + pgvector from `pgserver` (the dev extra) runs in a temporary directory.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engram import Memory
from engram.eval.data import load_questions
from minilm_scale import questions_of, rows_of
from vector_cache import CachedEmbedder, default_folder

TOP, RETURNED = 5, 20
Array = npt.NDArray[np.float32]


@contextmanager
def server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    import pgserver

    folder = tempfile.mkdtemp(prefix="engram-pgvector-")
    try:
        pg = pgserver.get_server(folder, cleanup_mode="delete")
        try:
            yield str(pg.get_uri())
        finally:
            pg.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def vector_bytes(row: Array) -> bytes:
    """pgvector's binary form: dimensions (int16), an unused int16, then the float4 components, big-endian."""
    return struct.pack(f">hh{len(row)}f", len(row), 0, *row.tolist())


def load(conn: Any, table: str, rows: Array) -> float:
    start = time.perf_counter()
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, v vector({rows.shape[1]}))")
    with conn.cursor().copy(f"COPY {table} (id, v) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "bytea"])  # the vector's binary input is read as its wire form
        for i, row in enumerate(rows):
            copy.write_row((i, vector_bytes(row)))
    conn.execute(f"ANALYZE {table}")
    conn.commit()
    return time.perf_counter() - start


def search(conn: Any, table: str, queries: Array, setting: str | None) -> tuple[list[list[int]], float]:
    """Each query's RETURNED ids and the p50 seconds of one query."""
    found, times = [], []
    with conn.cursor() as cur:
        if setting:
            cur.execute(setting)
        for q in queries:
            literal = "[" + ",".join(f"{x:.8g}" for x in q.tolist()) + "]"
            start = time.perf_counter()
            cur.execute(f"SELECT id FROM {table} ORDER BY v <#> %s::vector LIMIT {RETURNED}", (literal,))
            ids = [int(r[0]) for r in cur.fetchall()]
            times.append(time.perf_counter() - start)
            found.append(ids)
    conn.commit()
    return found, statistics.median(times)


def held(found: list[list[int]], best: npt.NDArray[np.int64]) -> float:
    return float(np.mean([len(set(f) & set(b.tolist())) / TOP for f, b in zip(found, best)]))


def measure(conn: Any, label: str, rows: Array, queries: Array, args: argparse.Namespace) -> None:
    table = f"bench_{label}"
    loaded = load(conn, table, rows)
    best = np.argsort(-(queries @ rows.T), axis=1, kind="stable")[:, :TOP]
    exact, exact_p50 = search(conn, table, queries, None)  # before any index: a scan of every row
    print(f"\n{label}: {len(rows):,} rows of {rows.shape[1]} dimensions, loaded in {loaded:.1f} s")
    print("| index | build (s) | index MB | search width | top 5 held in 20 | query p50 (ms) |")
    print("|---|---|---|---|---|---|")
    print(f"| none (exact scan) | - | - | - | {held(exact, best):.3f} | {exact_p50 * 1e3:.1f} |")
    kinds = [("hnsw", f"m = {m}, ef_construction = {efc}", "hnsw.ef_search", args.ef) for m, efc in [(16, 64)]]
    lists = max(1, len(rows) // 1000)
    kinds.append(("ivfflat", f"lists = {lists}", "ivfflat.probes", args.probes))
    for method, options, knob, widths in kinds:
        conn.execute("DROP INDEX IF EXISTS bench_index")
        start = time.perf_counter()
        conn.execute(f"CREATE INDEX bench_index ON {table} USING {method} (v vector_ip_ops) WITH ({options})")
        conn.commit()
        built = time.perf_counter() - start
        size = conn.execute("SELECT pg_relation_size('bench_index')").fetchone()[0] / 1e6
        for width in [int(w) for w in widths.split(",")]:
            found, p50 = search(conn, table, queries, f"SET {knob} = {width}")
            share = held(found, best)
            print(f"| {method} ({options}) | {built:.1f} | {size:.0f} | {width} | {share:.3f} | {p50 * 1e3:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory", type=Path, required=True, help="a MiniLM memory directory")
    parser.add_argument("--questions", type=Path, help="its questions.jsonl (default: the scale corpus's)")
    parser.add_argument("--size", type=int, default=10_000, help="scale corpus size of --memory (for its questions)")
    parser.add_argument("--url", help="a PostgreSQL with pgvector (default: pgserver in a temporary directory)")
    parser.add_argument("--ef", default="40,100,200")
    parser.add_argument("--probes", default="1,4,16")
    args = parser.parse_args()
    import psycopg

    texts = [q.question for q in load_questions(args.questions)] if args.questions else questions_of(args.size)
    with Memory(args.memory, embedder=CachedEmbedder(default_folder()), llm=False) as memory:
        queries = np.asarray(memory.context().embed(texts, "query"), dtype=np.float32)
        tables = {kind: rows_of(memory, kind) for kind in ("facts", "passages")}
    with server(args.url) as url, psycopg.connect(url) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
        print(f"{args.memory}: {len(queries)} questions; pgvector {version}")
        for kind, rows in tables.items():
            measure(conn, kind, rows, queries, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
