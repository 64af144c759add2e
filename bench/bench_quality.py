"""Retrieval quality on the shared MuSiQue data: every method at every k, on all 50 questions and on the two
halves separately (defaults were chosen looking at the first half only; the second half is held out).

    .venv/bin/python bench/bench_quality.py [--data ../shared/data/musique-1890] [--memory /tmp/musique.engram]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from engram import Memory
from engram.eval.data import load_corpus, load_questions
from engram.eval.runner import score_method

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
METHODS = ("hipporag2", "dense", "bm25")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--memory", type=Path, help="build into / reuse this memory (default: temporary)")
    parser.add_argument("--embedder", default=None)
    args = parser.parse_args()
    if not (args.data / "corpus.jsonl").exists():
        print(f"no data at {args.data}: nothing to measure", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = args.memory or Path(tmp) / "m"
        with Memory(path, embedder=args.embedder) as memory:
            start = time.perf_counter()
            memory.index(load_corpus(args.data / "corpus.jsonl"),
                         extractions=args.data / "openie-gpt-3.5-turbo-1106.jsonl")
            print(f"index: {time.perf_counter() - start:.1f} s; {memory.stats()['passages']} passages")
            questions = load_questions(args.data / "questions.jsonl")
            half = len(questions) // 2
            for label, subset in (("all", questions), ("tuning half", questions[:half]),
                                  ("held-out half", questions[half:])):
                print(f"\n{label} ({len(subset)} questions)")
                print(f"{'method':<10} {'R@1':>6} {'R@2':>6} {'R@5':>6} {'R@10':>6} {'all@5':>6}")
                for method in METHODS:
                    s, _ = score_method(memory, subset, method)
                    r = s["recall"]
                    print(f"{method:<10} {r['1']:6.3f} {r['2']:6.3f} {r['5']:6.3f} {r['10']:6.3f} "
                          f"{s['all_recall']['5']:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
