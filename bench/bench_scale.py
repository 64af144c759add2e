"""Scale (issue 11): build, open, RAM, query, insert and delete on synthetic memories of 10k to 1M passages.

The corpus is `scale_corpus.py`'s (about 9 facts and 8-10 new phrases per passage, Zipf-like reuse, some
variant phrases), with imported extractions and `HashEmbedder(dim=384)`, so no model runs and embedding time
is measured apart and left out of every column. Each size runs in two fresh processes, so RAM peaks are
each process's own (`ru_maxrss`):

* build: index the corpus in batches of `--batch` passages (each batch one commit, as a growing memory gets
  it), then close (writing the vector snapshot). "build" = wall time of the index calls and the close, minus
  their embedding time.
* open: open the memory and load its state ("open"), run the first query ("first query after open": it
  derives the graph arrays), then `--queries` hipporag2 queries one at a time, 3 passes (p50 excludes the query
  embedding: queries are embedded beforehand), then `--repeat` rounds of: insert one passage with its
  extraction (minus the embedding of its own texts), first query after it, delete one original document,
  first query after that.

    .venv/bin/python bench/bench_scale.py [--sizes 10000,100000] [--batch 20000] [--profile DIR] [--ann auto]
    .venv/bin/python bench/bench_scale.py --reopen DIR/engram-bench-scale-XXXX [--sizes 100000] [--changes]

`--keep DIR` keeps the memories; `--reopen` measures open, the first query and the query passes again on kept
memories (no inserts or deletes, so they can be reopened any number of times), e.g. at a quieter moment;
`--reopen DIR --changes` also times `--repeat` inserts and deletes, on a copy of each kept memory (removed
afterwards), so the kept one stays as it was.

It prints the issue's table, the per-step times and each column's growth exponent (time ~ N^a between
consecutive sizes). `--profile DIR` runs cProfile in both processes and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import math
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engram import Document, GraphConfig, Memory, MemoryConfig
from engram.embed import HashEmbedder

HERE = Path(__file__).resolve().parent
DIM = 384
GIB = 2**30


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def peak_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


class AnonPeak:
    """The peak of the process's anonymous memory (RssAnon in /proc/self/status), sampled every 20 ms by a
    thread. `ru_maxrss` (the RAM peak column) also counts the mapped files' pages the process touched (vectors,
    the ANN index), which are page cache the kernel can take back under pressure; this is the part it cannot."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    self.peak = max(self.peak, int(line.split()[1]) * 1024)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.peak


class QueryCache:
    """`HashEmbedder` with the benchmark's queries embedded beforehand, so query timings exclude embedding."""

    def __init__(self, queries: Sequence[str]) -> None:
        self.inner = HashEmbedder(dim=DIM)
        self.cache = dict(zip(queries, self.inner.embed(list(queries), role="query")))

    @property
    def identity(self) -> dict[str, Any]:
        return self.inner.identity

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str], role: Any = "passage", progress: Any = None) -> Any:
        if role == "query" and all(t in self.cache for t in texts):
            return np.stack([self.cache[t] for t in texts])
        return self.inner.embed(texts, role=role, progress=progress)


def config_for(ann: str, precision: str = "default") -> MemoryConfig | None:
    settings = {k: v for k, v in (("ann", ann), ("vector_precision", precision)) if v != "default"}
    if not settings:
        return None
    return MemoryConfig(graph=GraphConfig(**settings))  # type: ignore[arg-type]


class Profiler:
    def __init__(self, folder: Path | None, name: str) -> None:
        self.folder, self.name = folder, name
        self.profile = cProfile.Profile() if folder else None

    def __enter__(self) -> None:
        if self.profile:
            self.profile.enable()

    def __exit__(self, *exc: object) -> None:
        if self.profile and self.folder:
            self.profile.disable()
            self.profile.dump_stats(str(self.folder / f"{self.name}.prof"))
            say(f"--- profile {self.name} (by cumulative time, then own time)")
            stats = pstats.Stats(self.profile, stream=sys.stderr)
            stats.sort_stats("cumulative").print_stats(25)
            stats.sort_stats("tottime").print_stats(15)


def child_build(
    size: int, folder: Path, batch: int, repeat: int, ann: str, profile: Path | None, precision: str = "default"
) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from scale_corpus import Corpus

    corpus = Corpus(seed=size)
    anon = AnonPeak()
    memory = Memory(folder / "m", embedder=HashEmbedder(dim=DIM), config=config_for(ann, precision))
    wall, embed, generate = 0.0, 0.0, 0.0
    steps: dict[str, float] = {}
    report = None
    with Profiler(profile, f"build{size}"):
        start = time.perf_counter()
        for docs, extractions in corpus.batches(size, batch):
            generate += time.perf_counter() - start
            start = time.perf_counter()
            report = memory.index(docs, extractions=extractions)
            wall += time.perf_counter() - start
            embed += report.timings.get("embed", 0.0)
            for k, v in report.timings.items():
                steps[k] = steps.get(k, 0.0) + v
            say(f"[{size}] {corpus.made:,} passages: {wall - embed:.1f} s excl. embedding ({embed:.1f} s embedding)"
                f", rss {rss() / GIB:.2f} GiB")  # fmt: skip
            start = time.perf_counter()
        start = time.perf_counter()
        memory.close()
        closing = time.perf_counter() - start
    assert report is not None
    extra = [corpus.passage() for _ in range(repeat)]
    (folder / "extra.json").write_text(json.dumps([[d.id, d.text, d.title, e] for d, e in extra]))
    (folder / "queries.json").write_text(json.dumps(corpus.queries(50)))
    return {
        "build": wall - embed + closing,
        "embed": embed,
        "close": closing,
        "generate": generate,
        "steps": steps,
        "stats": report.stats,
        "build_peak": peak_rss(),
        "build_anon_peak": anon.stop(),
        "build_load": os.getloadavg()[1],
    }


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def child_open(size: int, folder: Path, repeat: int, ann: str, profile: Path | None) -> dict[str, Any]:
    queries = json.loads((folder / "queries.json").read_text())
    extra = json.loads((folder / "extra.json").read_text())
    embedder = QueryCache(queries)
    anon = AnonPeak()
    base = rss()
    out: dict[str, Any] = {"insert": [], "insert_embed": [], "insert_steps": [], "delete": [], "delete_steps": []}
    out |= {"first_after_insert": [], "first_after_delete": []}
    with Profiler(profile, f"open{size}"):
        start = time.perf_counter()
        memory = Memory(folder / "m", embedder=embedder, config=config_for(ann))
        memory.stats()
        out["open"] = time.perf_counter() - start
        out["open_rss"] = rss() - base
        out["first_after_open"] = timed(lambda: memory.retrieve(queries[0], top_k=5))
        per_query = []
        for _ in range(3):
            for q in queries:
                per_query.append(timed(lambda q=q: memory.retrieve(q, top_k=5)))
        out["query_p50"] = statistics.median(per_query)
        out["query_p90"] = float(np.percentile(per_query, 90))
        if repeat == 0:  # --reopen: queries only
            out["before_close_peak"] = peak_rss()
            out["close_after"] = timed(memory.close)
            return out | {"open_peak": peak_rss(), "open_anon_peak": anon.stop(), "open_load": os.getloadavg()[1]}
        victims = [f"doc{int(i):07d}" for i in np.random.default_rng(size).choice(size, repeat, replace=False)]
        if (folder / "victims.json").exists():  # --reopen --changes: not the documents the first run deleted
            victims = json.loads((folder / "victims.json").read_text())
        for (doc_id, text, title, extraction), victim in zip(extra, victims):
            start = time.perf_counter()
            report = memory.index([Document(doc_id, text, title=title)], extractions=[extraction])
            total = time.perf_counter() - start
            out["insert"].append(total - report.timings.get("embed", 0.0))
            out["insert_embed"].append(report.timings.get("embed", 0.0))
            out["insert_steps"].append(report.timings)
            out["first_after_insert"].append(timed(lambda: memory.retrieve(queries[1], top_k=5)))
            start = time.perf_counter()
            report = memory.delete([victim])
            out["delete"].append(time.perf_counter() - start)
            out["delete_steps"].append(report.timings)
            out["first_after_delete"].append(timed(lambda: memory.retrieve(queries[2], top_k=5)))
        out["before_close_peak"] = peak_rss()
        out["close_after"] = timed(memory.close)  # writes the saved state that a later --reopen opens from
    out["open_peak"] = peak_rss()
    out["open_anon_peak"] = anon.stop()
    out["open_load"] = os.getloadavg()[1]
    return out


def run_child(args: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, check=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(size: int, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    folder = root / f"s{size}"
    folder.mkdir()
    common = ["--repeat", str(args.repeat), "--ann", args.ann]
    if args.profile:
        common += ["--profile", str(args.profile)]
    built = run_child(["--child", "build", "--size", str(size), "--folder", str(folder), "--batch", str(args.batch),
                       "--precision", args.precision, *common])  # fmt: skip
    say(f"[{size}] built: {json.dumps({k: v for k, v in built.items() if k != 'steps'})}")
    opened = run_child(["--child", "open", "--size", str(size), "--folder", str(folder), *common])
    say(f"[{size}] opened: open {opened['open']:.2f} s, p50 {opened['query_p50'] * 1000:.1f} ms")
    return {"size": size, **built, **opened}


def exponent(a: float, b: float, n1: int, n2: int) -> str:
    if a <= 0 or b <= 0 or n1 == n2:
        return "-"
    return f"{math.log(b / a) / math.log(n2 / n1):.2f}"


COLUMNS = [
    ("build (excl. embedding)", lambda r: r["build"], "s"),
    ("open", lambda r: r["open"], "s"),
    ("RAM peak", lambda r: max(r["build_peak"], r["open_peak"]) / GIB, "GiB"),
    ("hipporag2 query p50", lambda r: r["query_p50"] * 1000, "ms"),
    ("insert 1 passage", lambda r: statistics.median(r["insert"]), "s"),
    ("delete 1 document", lambda r: statistics.median(r["delete"]), "s"),
    ("first query after insert", lambda r: statistics.median(r["first_after_insert"]) * 1000, "ms"),
]


def print_table(results: list[dict[str, Any]]) -> None:
    print("| passages | phrases | facts | edges | " + " | ".join(f"{n} ({u})" for n, _, u in COLUMNS) + " |")
    print("|---" * (4 + len(COLUMNS)) + "|")
    for r in results:
        s = r["stats"]
        cells = [f"{fn(r):.3g}" if fn(r) < 100 else f"{fn(r):.0f}" for _, fn, _ in COLUMNS]
        print(f"| {r['size']:,} | {s['phrases']:,} | {s['facts']:,} | {s['edges']:,} | " + " | ".join(cells) + " |")
    for a, b in itertools.pairwise(results):
        cells = [exponent(fn(a), fn(b), a["size"], b["size"]) for _, fn, _ in COLUMNS]
        print(f"| growth exponent {a['size']:,} -> {b['size']:,} | | | | " + " | ".join(cells) + " |")
    print()
    for r in results:
        steps = ", ".join(f"{k} {v:.1f}" for k, v in r["steps"].items())
        print(f"{r['size']:,}: build steps (s, summed over batches): {steps}; close {r['close']:.1f}; "
              f"embedding {r['embed']:.1f} (excluded); generating the corpus {r['generate']:.1f} (excluded)")
        print(f"    RAM peak: build {r['build_peak'] / GIB:.2f} GiB, "
              f"open+queries+changes {r['open_peak'] / GIB:.2f} GiB (before the close "
              f"{r.get('before_close_peak', float('nan')) / GIB:.2f} GiB, after open {r['open_rss'] / GIB:.2f} GiB); "
              f"first query after open {r['first_after_open']:.2f} s; query p90 {r['query_p90'] * 1000:.1f} ms; "
              f"first query after delete {statistics.median(r['first_after_delete']) * 1000:.0f} ms; "
              f"first insert after open {r['insert'][0]:.3f} s (inserts: "
              f"{', '.join(f'{t:.3f}' for t in r['insert'])} s; the first loads the kept phrase ANN index, if any); "
              f"close after the changes {r['close_after']:.1f} s")
        if "build_anon_peak" in r:
            print(f"    anonymous memory peak (RssAnon sampled every 20 ms; the RAM peak also counts mapped files' "
                  f"pages): build {r['build_anon_peak'] / GIB:.2f} GiB, open+queries+changes "
                  f"{r['open_anon_peak'] / GIB:.2f} GiB")  # fmt: skip
        loads = r.get("build_load", float("nan")), r.get("open_load", float("nan"))
        print(f"    machine load (5-minute load average on 2 cores) at the end of the build {loads[0]:.1f}, "
              f"of the queries and changes {loads[1]:.1f}")
        for name in ("insert", "delete"):
            rows = r[f"{name}_steps"]
            keys = sorted({k for row in rows for k in row})
            med = ", ".join(f"{k} {statistics.median(row.get(k, 0.0) for row in rows) * 1000:.1f}" for k in keys)
            print(f"    {name} median ms per step: {med}")


def fresh_changes(size: int, count: int, folder: Path) -> None:
    """extra.json and victims.json for `count` more changes of a kept memory: the corpus's next passages after
    the ones the first run inserted (which the kept memory holds), and documents the first run did not delete."""
    sys.path.insert(0, str(HERE))
    from scale_corpus import Corpus

    corpus = Corpus(seed=size)
    for _ in corpus.batches(size, 20_000):
        pass
    first = [corpus.passage()[0].id for _ in range(count)]  # what the first run's --repeat inserted (at most)
    extra = [corpus.passage() for _ in range(count)]
    (folder / "extra.json").write_text(json.dumps([[d.id, d.text, d.title, e] for d, e in extra]))
    deleted = {int(i) for k in range(1, 11) for i in np.random.default_rng(size).choice(size, k, replace=False)}
    picks = [int(i) for i in np.random.default_rng(size + 1).permutation(size) if int(i) not in deleted][:count]
    (folder / "victims.json").write_text(json.dumps([f"doc{i:07d}" for i in picks]))
    say(f"[{size}] changes: insert {', '.join(d.id for d, _ in extra)} (after {', '.join(first)}); "
        f"delete {', '.join(f'doc{i:07d}' for i in picks)}")  # fmt: skip


def reopen(root: Path, sizes: list[int], ann: str, changes: int) -> None:
    """Open the memories `--keep` left under `root` again: open, first query, query passes, and with `changes`
    that many inserts and deletes (on a copy of the memory, removed afterwards)."""
    head = "| passages | open (s) | RSS after open (GiB) | first query after open (s) | hipporag2 query p50 (ms) " \
        "| p90 (ms) | RAM peak before the close (GiB) | RAM peak (GiB) |"
    if changes:
        head += " first insert (s) | insert (s) | delete (s) | first query after insert (ms) | after delete (ms) |"
    head += " close (s) | load |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for size in sizes:
        folder = root / f"s{size}"
        if not (folder / "m").is_dir():
            say(f"[{size}] no kept memory at {folder}; skipped")
            continue
        scratch = Path(tempfile.mkdtemp(prefix=f"s{size}-changes-", dir=root)) if changes else None
        try:
            if scratch:
                shutil.copy2(folder / "queries.json", scratch / "queries.json")
                fresh_changes(size, changes, scratch)
                shutil.copytree(folder / "m", scratch / "m")
            r = run_child(["--child", "open", "--size", str(size), "--folder", str(scratch or folder),
                           "--repeat", str(changes), "--ann", ann])  # fmt: skip
        finally:
            if scratch:
                shutil.rmtree(scratch)
        cells = [f"{r['open']:.2f}", f"{r['open_rss'] / GIB:.2f}", f"{r['first_after_open']:.2f}",
                 f"{r['query_p50'] * 1000:.1f}", f"{r['query_p90'] * 1000:.1f}",
                 f"{r['before_close_peak'] / GIB:.2f}", f"{r['open_peak'] / GIB:.2f}"]
        if changes:
            cells += [f"{r['insert'][0]:.3f}", f"{statistics.median(r['insert'][1:] or r['insert']):.4f}",
                      f"{statistics.median(r['delete']):.4f}",
                      f"{statistics.median(r['first_after_insert']) * 1000:.0f}",
                      f"{statistics.median(r['first_after_delete']) * 1000:.0f}"]
        cells += [f"{r['close_after']:.1f}", f"{r['open_load']:.1f}"]
        print(f"| {size:,} | " + " | ".join(cells) + " |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--batch", type=int, default=20_000, help="passages per index() call while building")
    parser.add_argument("--repeat", type=int, default=5, help="inserts and deletes timed per size")
    parser.add_argument("--ann", default="default", help="GraphConfig.ann: auto, on or off (default: the default)")
    parser.add_argument("--precision", default="default",
                        help="GraphConfig.vector_precision of the built memories: int8, float16, float32")  # fmt: skip
    parser.add_argument("--profile", type=Path, help="cProfile both processes into DIR/*.prof")
    parser.add_argument("--keep", type=Path, help="build the memories under this folder (kept)")
    parser.add_argument("--reopen", type=Path, help="a folder --keep made: open and query its memories again")
    parser.add_argument("--changes", action="store_true", help="with --reopen: also time --repeat inserts and deletes")
    parser.add_argument("--child", choices=("build", "open"), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    if args.child == "build":
        built = child_build(args.size, args.folder, args.batch, args.repeat, args.ann, args.profile, args.precision)
        print(json.dumps(built))
        return 0
    if args.child == "open":
        print(json.dumps(child_open(args.size, args.folder, args.repeat, args.ann, args.profile)))
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.reopen:
        reopen(args.reopen, sizes, args.ann, args.repeat if args.changes else 0)
        return 0
    results = []
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="engram-bench-scale-") as tmp:
        root = Path(tempfile.mkdtemp(prefix="engram-bench-scale-", dir=args.keep)) if args.keep else Path(tmp)
        for size in sizes:
            results.append(measure(size, root, args))
            print_table(results)  # so far, in case a later size does not finish
            print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
