"""The PostgreSQL backend against the memory directory on the same synthetic memories (issue 11).

The corpus is bench_scale's (`scale_corpus.py`: ~9 facts and 8-10 new phrases per passage), with imported
extractions and `HashEmbedder(dim=384)`, so no model runs; embedding time is left out of every column. Each
backend and size runs in two fresh processes:

* build: index the corpus in batches of `--batch` passages (one commit each), then close. "build" = wall time
  minus embedding time.
* open: open the memory and load its state ("open": for PostgreSQL every row and vector comes over the wire;
  for a directory vectors are memory-mapped from the snapshot), the process's RSS growth over the open and
  the first query ("RAM"), hipporag2 query p50 (queries embedded beforehand), then one passage inserted by a
  second handle (another writer: "insert 1") and the first query of the first handle after it while the
  second is still open ("refresh, writer open": it replays the commit log, or reloads the state of the new
  generation, as a process that did not make the commit does), then a second passage inserted by the second
  handle, closed (a directory writes its snapshot), and the first handle's next query ("refresh, writer
  closed"). The result line also gives `open_peak`, the process's peak RSS before the second handle opens (the
  open, the first query and the timed queries), and `peak`, at the end (the second handle holds a state too).

    .venv/bin/python bench/bench_postgres.py [--sizes 2000,10000] [--url postgresql://...]

Without `--url` a PostgreSQL 16 + pgvector from `pgserver` (the dev extra) runs in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_scale import DIM, GIB, QueryCache, peak_rss, rss, say  # noqa: E402
from engram import Document, Memory  # noqa: E402
from engram.embed import HashEmbedder  # noqa: E402


def child_build(size: int, target: str, folder: Path, batch: int) -> dict[str, Any]:
    from scale_corpus import Corpus

    corpus = Corpus(seed=size)
    wall = embed = 0.0
    with Memory(target, embedder=HashEmbedder(dim=DIM), llm=False) as memory:
        for docs, extractions in corpus.batches(size, batch):
            start = time.perf_counter()
            report = memory.index(docs, extractions=extractions)
            wall += time.perf_counter() - start
            embed += report.timings.get("embed", 0.0)
            say(f"[{size}] {corpus.made:,} passages: {wall - embed:.1f} s excl. embedding")
        start = time.perf_counter()
    wall += time.perf_counter() - start
    extra = [corpus.passage() for _ in range(2)]
    (folder / "extra.json").write_text(json.dumps([[d.id, d.text, d.title, e] for d, e in extra]))
    (folder / "queries.json").write_text(json.dumps(corpus.queries(30)))
    return {"build": wall - embed, "stats": report.stats, "build_peak": peak_rss()}


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def child_open(target: str, folder: Path) -> dict[str, Any]:
    queries = json.loads((folder / "queries.json").read_text())
    extra = json.loads((folder / "extra.json").read_text())
    embedder = QueryCache(queries)
    base = rss()
    out: dict[str, Any] = {}
    with Memory(target, embedder=embedder, llm=False) as memory:
        out["open"] = timed(memory.stats)
        out["first_query"] = timed(lambda: memory.retrieve(queries[0], top_k=5))
        out["ram"] = rss() - base
        out["query_p50"] = statistics.median(
            timed(lambda q=q: memory.retrieve(q, top_k=5)) for _ in range(3) for q in queries
        )
        out["open_peak"] = peak_rss()  # one handle: its open, first query and queries
        with Memory(target, embedder=embedder, llm=False) as other:
            other.stats()  # loaded before the commit is timed
            documents = [(Document(i, text, title=title), e) for i, text, title, e in extra]
            out["insert"] = timed(lambda: other.index([documents[0][0]], extractions=[documents[0][1]]))
            out["refresh_open"] = timed(lambda: memory.retrieve(queries[1], top_k=5))  # the writer still open
            other.index([documents[1][0]], extractions=[documents[1][1]])
        out["refresh"] = timed(lambda: memory.retrieve(queries[2], top_k=5))  # the writer closed
    out["peak"] = peak_rss()  # with the second handle, which holds a state of its own
    return out


def run_child(args: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, check=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(backend: str, size: int, target: str, folder: Path, batch: int) -> dict[str, Any]:
    common = ["--target", target, "--folder", str(folder)]
    built = run_child(["--child", "build", "--size", str(size), "--batch", str(batch), *common])
    opened = run_child(["--child", "open", *common])
    return {"backend": backend, "size": size, **built, **opened}


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per backend and size; "RAM per 1M passages" is the slope of RAM between consecutive sizes of a
    backend (what each further passage costs), scaled to a million: an extrapolation, not a measurement."""
    head = "| backend | passages | phrases | facts | build (excl. embedding) | open | RAM after open + 1 query "
    head += "| RAM per 1M passages (slope) | query p50 | insert 1 | refresh, writer open | refresh, writer closed |"
    print(head)
    print("|" + "---|" * 12)
    previous: dict[str, dict[str, Any]] = {}
    for r in rows:
        before = previous.get(r["backend"])
        slope = "-"
        if before is not None and r["size"] > before["size"]:
            slope = f"{(r['ram'] - before['ram']) / (r['size'] - before['size']) * 1_000_000 / GIB:.1f} GiB"
        previous[r["backend"]] = r
        print(
            f"| {r['backend']} | {r['size']:,} | {r['stats']['phrases']:,} | {r['stats']['facts']:,} "
            f"| {r['build']:.1f} s | {r['open']:.2f} s | {r['ram'] / GIB:.3f} GiB | {slope} "
            f"| {r['query_p50'] * 1000:.1f} ms | {r['insert'] * 1000:.0f} ms | {r['refresh_open'] * 1000:.0f} ms "
            f"| {r['refresh'] * 1000:.0f} ms |"
        )


def postgres_uri(url: str | None) -> tuple[str, Any]:
    if url:
        return url, None
    import pgserver

    server = pgserver.get_server(tempfile.mkdtemp(prefix="engram-pg-bench-"), cleanup_mode="delete")
    return server.get_uri(), server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2000,10000")
    parser.add_argument("--batch", type=int, default=5000, help="passages per index() call while building")
    parser.add_argument("--url", help="a PostgreSQL server with pgvector (default: a temporary pgserver)")
    parser.add_argument("--backends", default="directory,postgres")
    parser.add_argument("--child", choices=("build", "open"), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "build":
        print(json.dumps(child_build(args.size, args.target, args.folder, args.batch)))
        return 0
    if args.child == "open":
        print(json.dumps(child_open(args.target, args.folder)))
        return 0
    backends = args.backends.split(",")
    uri, server = postgres_uri(args.url) if "postgres" in backends else ("", None)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="engram-bench-pg-") as tmp:
            for size in [int(s) for s in args.sizes.split(",")]:
                for backend in backends:
                    folder = Path(tmp) / f"{backend}{size}"
                    folder.mkdir()
                    schema = f"bench_{size}_{uuid.uuid4().hex[:6]}"
                    sep = "&" if "?" in uri else "?"
                    target = str(folder / "m") if backend == "directory" else f"{uri}{sep}schema={schema}"
                    rows.append(measure(backend, size, target, folder, args.batch))
                    say(json.dumps(rows[-1]))
    finally:
        if server is not None:
            server.cleanup()
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
