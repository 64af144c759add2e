"""Where engram stands now: the README's results table, regenerated into bench/RESULTS.md.

Quality: recall@1/2/5 on the 50 shared MuSiQue questions (released GPT-3.5 triples, the default embedder, no LLM
filter) of the default method, the paper's method, dense and bm25, with the last 25 questions (held out from
every tuning) apart; the official HippoRAG 2 code's figures are read from the data's README (that code does not
run here, so they are quoted, not measured). Speed: the same 1,890-passage memory (build with its embedding,
open, query p50 with the query's embedding, disk) and `bench_scale.py`'s synthetic memories at --sizes
(build without embedding, open, RAM peak, query p50, insert, disk), each in fresh processes.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/results.py [--sizes 100000] [--out bench/RESULTS.md] [--readme README.md]

The README's results block (between its `results:begin` and `results:end` markers) gets the same tables.

About 5 minutes for the quality rows and the 1,890-passage memory, and 25-30 more for 100k on a 2-core machine.
`--sizes ''` skips the synthetic memories. The history of these numbers is the file's git log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parents[1] / "shared" / "data" / "musique-1890"
RELEASED = "openie-gpt-3.5-turbo-1106.jsonl"
METHODS = (("hipporag2", "engram, default (`hipporag2`)"), ("hipporag2-paper", "engram, the paper's method"),
           ("dense", "dense (all-MiniLM-L6-v2)"), ("bm25", "bm25"))  # fmt: skip
GIB = 2**30


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def official(data: Path) -> tuple[str, str]:
    """The official code's recall@2 / recall@5 on these 50 questions, as the data README states them."""
    text = (data.parent / "README.md").read_text(encoding="utf-8") if (data.parent / "README.md").exists() else ""
    found = re.search(r"On the 50 questions here: official HippoRAG 2 ([\d.]+) / ([\d.]+)", " ".join(text.split()))
    return (found.group(1), found.group(2)) if found else ("-", "-")


def child_musique(data: Path, folder: Path) -> dict[str, Any]:
    """In a fresh process: build the shared memory, score each method, reopen it and time single queries."""
    from engram import Memory
    from engram.eval.data import load_corpus, load_questions
    from engram.eval.runner import score_method

    questions = load_questions(data / "questions.jsonl")
    out: dict[str, Any] = {"quality": {}}
    start = time.perf_counter()
    with Memory(folder / "m") as memory:
        memory.index(load_corpus(data / "corpus.jsonl"), extractions=data / RELEASED)
        out["stats"] = memory.stats()
    out["build"] = time.perf_counter() - start  # with the close, which writes the snapshot
    start = time.perf_counter()
    with Memory(folder / "m") as memory:
        memory.stats()  # the state loads on first use: open = construct + load
        out["open"] = time.perf_counter() - start
        half = len(questions) // 2
        for method, _ in METHODS:
            every, _ = score_method(memory, questions, method)
            held, _ = score_method(memory, questions[half:], method)
            out["quality"][method] = {**{k: every["recall"][k] for k in ("1", "2", "5")}, "held5": held["recall"]["5"]}
        times = []
        for q in questions:  # one query per call, its embedding included, as a user's query runs
            t = time.perf_counter()
            memory.retrieve(q.question, top_k=5)
            times.append(time.perf_counter() - t)
        out["query_p50"] = statistics.median(times)
    out["disk"] = disk_bytes(folder / "m")
    out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def scale(size: int, root: Path) -> dict[str, Any]:
    """One `bench_scale.py` size, its build and open in fresh processes as that script runs them."""
    sys.path.insert(0, str(HERE))
    import bench_scale

    args = argparse.Namespace(repeat=5, ann="default", precision="default", profile=None, batch=20_000)
    row = bench_scale.measure(size, root, args)
    row["disk"] = disk_bytes(root / f"s{size}" / "m")
    return row


def machine() -> str:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = re.findall(r"model name\s*:\s*(.+)", cpuinfo.read_text())
        model = names[0].strip() if names else ""
    return f"{os.cpu_count()} cores{', ' + model if model else ''}, Python {platform.python_version()}"


def render(musique: dict[str, Any], rows: list[dict[str, Any]], data: Path) -> str:
    from engram import __version__

    o2, o5 = official(data)
    lines = [
        "# Results",
        "",
        f"Written by `bench/results.py` on {date.today().isoformat()} (engram {__version__}; {machine()}). Re-run it",
        "to regenerate this file; its history is this file's git log. Timings are one run on the machine named",
        "above: compare them as ratios within one run.",
        "",
        "## Quality: the 50 shared MuSiQue questions",
        "",
        "Recall@k of the gold passages (released GPT-3.5 triples, all-MiniLM-L6-v2, no LLM filter). Held out:",
        "the last 25 questions, never looked at while choosing a setting.",
        "",
        "| method | R@1 | R@2 | R@5 | R@5, held-out 25 |",
        "|---|---|---|---|---|",
    ]
    for method, label in METHODS:
        q = musique["quality"][method]
        lines.append(f"| {label} | {q['1']:.3f} | {q['2']:.3f} | {q['5']:.3f} | {q['held5']:.3f} |")
    lines += [
        f"| official HippoRAG 2 code (c617143), quoted from the data's README | - | {o2} | {o5} | - |",
        "",
        "## Speed",
        "",
        "| memory | passages | phrases | facts | build | open | query p50 | RAM peak | disk per passage |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    s = musique["stats"]
    per = musique["disk"] / s["passages"] / 1024
    lines.append(f"| shared MuSiQue, MiniLM (build and query include embedding) | {s['passages']:,} | "
                 f"{s['phrases']:,} | {s['facts']:,} | {musique['build']:.1f} s | {musique['open']:.2f} s | "
                 f"{musique['query_p50'] * 1000:.1f} ms | {musique['peak'] / GIB:.2f} GiB | {per:.1f} KB |")
    for r in rows:
        st = r["stats"]
        peak = max(r["build_peak"], r["open_peak"]) / GIB
        per = r["disk"] / r["size"] / 1024
        lines.append(f"| synthetic, hash vectors (embedding excluded) | {r['size']:,} | {st['phrases']:,} | "
                     f"{st['facts']:,} | {r['build'] / 60:.1f} min | {r['open']:.2f} s | "
                     f"{r['query_p50'] * 1000:.1f} ms | {peak:.2f} GiB | {per:.1f} KB |")  # fmt: skip
    if rows:
        lines += ["", "Synthetic memories: `bench/bench_scale.py`'s corpus (about 9 facts and 10 phrases per passage);",
                  "insert of one passage (median of 5): "
                  + ", ".join(f"{statistics.median(r['insert']) * 1000:.0f} ms at {r['size']:,}" for r in rows)
                  + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", default="100000", help="synthetic sizes, comma-separated ('' for none)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--readme", type=Path, default=HERE.parent / "README.md", help="its results block is replaced")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child_musique(args.data, args.child)))
        return 0
    if not (args.data / "corpus.jsonl").exists():
        print(f"no shared data at {args.data} (--data names it): nothing to measure", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="engram-results-") as tmp:
        print("shared MuSiQue memory: build, quality, queries ...", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, __file__, "--data", str(args.data), "--child", tmp],
                              stdout=subprocess.PIPE, check=True, text=True)  # fmt: skip
        musique = json.loads(done.stdout.strip().splitlines()[-1])
        rows = []
        for size in (int(s) for s in args.sizes.split(",") if s.strip()):
            print(f"synthetic memory of {size:,} passages ...", file=sys.stderr, flush=True)
            root = Path(tmp) / "scale"
            root.mkdir(exist_ok=True)
            rows.append(scale(size, root))
    text = render(musique, rows, args.data)
    args.out.write_text(text, encoding="utf-8")
    if args.readme.exists():
        paste_into_readme(args.readme, text)
    print(text)
    return 0


def paste_into_readme(readme: Path, text: str) -> None:
    """The tables of `text` between the README's results markers (the rest of the README is left as it is)."""
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    old = readme.read_text(encoding="utf-8")
    if begin not in old or end not in old:
        print(f"{readme} has no {begin} ... {end} block: not changed", file=sys.stderr)
        return
    tables = [line for line in text.splitlines() if line.startswith("|")]
    cut = next(i for i, line in enumerate(tables) if line.startswith("| memory "))
    block = "\n".join([*tables[:cut], "", *tables[cut:]])
    head, rest = old.split(begin, 1)
    new = f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}"
    tmp = readme.with_suffix(".tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(readme)


if __name__ == "__main__":
    sys.exit(main())
