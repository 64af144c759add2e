"""A long run of queries in one process: does anything drift that would end a long-lived server?

Runs `Memory.retrieve` over the shared MuSiQue questions again and again (one question per call, as a server
answers them) on a memory already indexed from them, and prints every `--every` queries the reference count of
None (on Python before 3.12 a C extension that takes references to None away aborts the process when it reaches
zero: "Fatal Python error: none_dealloc"), the process's resident memory, and the time per query so far.

    .venv/bin/python bench/soak_queries.py --memory DIR [--queries 20000] [--every 5000] [--method hipporag2]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

from engram import Memory
from engram.eval.data import load_questions

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--memory", type=Path, required=True, help="a memory indexed from --data")
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=5_000)
    parser.add_argument("--method", default="hipporag2")
    args = parser.parse_args()
    if not (args.data / "questions.jsonl").exists():
        print(f"no data at {args.data}: nothing to measure", file=sys.stderr)
        return 2
    questions = [q.question for q in load_questions(args.data / "questions.jsonl")]
    with Memory(args.memory, llm=False) as memory:
        memory.retrieve(questions[:1], top_k=10, method=args.method)  # the view's lookups built first
        start, before = time.perf_counter(), sys.getrefcount(None)
        print(f"None's reference count at the start: {before}", flush=True)
        for done in range(1, args.queries + 1):
            memory.retrieve([questions[done % len(questions)]], top_k=10, method=args.method)
            if done % args.every == 0 or done == args.queries:
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                per = (time.perf_counter() - start) * 1000 / done
                refs = sys.getrefcount(None)
                print(f"{done} queries: None's count {refs} ({refs - before:+d}), peak RSS {rss:.0f} MiB, "
                      f"{per:.2f} ms/query incl. the query's embedding", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
