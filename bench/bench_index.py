"""Indexing and retrieval speed on the shared MuSiQue data (1,890 passages, released GPT-3.5 extractions).

Targets (issue 2): indexing at most 90 s with the default embedder, of which everything except computing
embeddings is under 10 s; retrieval under 10 ms per query at p50, excluding the query's embedding and LLM calls.

    .venv/bin/python bench/bench_index.py [--data ../shared/data/musique-1890] [--embedder minilm]
    .venv/bin/python bench/bench_index.py --memory DIR    # retrieval only, on a memory already indexed from --data

Besides the p50 and p90 over every timed query, the retrieval lines print the median over the questions of each
one's fastest pass: less of a shared machine's noise, for comparing two versions of the code.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from engram import Memory
from engram.eval.data import load_corpus, load_questions
from engram.retrieve.default import hipporag2_default
from engram.retrieve.hipporag2 import hipporag2

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--embedder", default=None)
    parser.add_argument("--repeat", type=int, default=5, help="timed passes over the questions")
    parser.add_argument("--memory", type=Path, help="time retrieval only, on this memory (indexed from --data)")
    args = parser.parse_args()
    if not (args.data / "corpus.jsonl").exists():
        print(f"no data at {args.data}: nothing to measure", file=sys.stderr)
        return 2
    questions = [q.question for q in load_questions(args.data / "questions.jsonl")]
    if args.memory is not None:
        if not args.memory.is_dir():
            print(f"no memory at {args.memory}", file=sys.stderr)
            return 2
        with Memory(args.memory, embedder=args.embedder, llm=False, create=False) as memory:
            print(f"memory {args.memory}: {memory.stats()['passages']} passages")
            measure_retrieval(memory, questions, args.repeat)
        return 0
    corpus = load_corpus(args.data / "corpus.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        memory = Memory(Path(tmp) / "m", embedder=args.embedder)
        opened = time.perf_counter() - start
        start = time.perf_counter()
        report = memory.index(corpus, extractions=args.data / "openie-gpt-3.5-turbo-1106.jsonl")
        total = time.perf_counter() - start
        t = report.timings
        embed = t.get("embed", 0.0)
        print(f"indexed {report.stats['passages']} passages, {report.stats['phrases']} phrases, "
              f"{report.stats['facts']} facts, {report.stats['edges']} edges")
        print(f"index total {total:7.2f} s   (target <= 90 s)   [memory open {opened:.2f} s]")
        print(f"  embeddings {embed:7.2f} s")
        print(f"  all else   {total - embed:7.2f} s   (target < 10 s)")
        for name in ("prepare", "import", "extract", "tables", "synonyms", "commit"):
            print(f"    {name:<9} {t.get(name, 0.0):6.2f} s")
        start = time.perf_counter()
        reopened = Memory(Path(tmp) / "m", embedder=memory.embedder)
        reopened.stats()
        print(f"reopen + load  {time.perf_counter() - start:6.2f} s")
        measure_retrieval(memory, questions, args.repeat)
        memory.close()
        reopened.close()
    return 0


def measure_retrieval(memory: Memory, questions: list[str], repeat: int) -> None:
    ctx = memory.context()
    index, config = ctx.view, ctx.config
    vectors = ctx.embed_queries(questions)
    for name, method in (("hipporag2", hipporag2_default), ("hipporag2-paper", hipporag2)):
        method(index, vectors[:1], questions[:1], config, 10)  # per-view caches (query-link lookup) built once
        per_query = np.zeros((repeat, len(questions)))
        for r in range(repeat):
            for i, q in enumerate(questions):
                start = time.perf_counter()
                method(index, vectors[i : i + 1], [q], config, 10)
                per_query[r, i] = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        method(index, vectors, questions, config, 10)
        batched = (time.perf_counter() - start) * 1000 / len(questions)
        fastest = statistics.median(per_query.min(axis=0).tolist())  # less of the machine's noise: A/B comparisons
        print(f"{name} retrieval, excluding query embedding: p50 {statistics.median(per_query.ravel().tolist()):.2f} "
              f"ms, p90 {np.percentile(per_query, 90):.2f} ms per query (target p50 < 10 ms); "
              f"batched {batched:.2f} ms/query; median of each question's fastest pass {fastest:.2f} ms")
    start = time.perf_counter()
    memory.retrieve(questions, top_k=10)
    full = (time.perf_counter() - start) * 1000 / len(questions)
    print(f"memory.retrieve incl. query embedding: {full:.2f} ms/query (batch of {len(questions)})")


if __name__ == "__main__":
    sys.exit(main())
