"""Relevant segment extraction (rse) against plain top-k passages at the same token budget, on the shared
MuSiQue data (MiniLM, the released GPT-3.5 triples as extractions, no LLM).

For each base ranking (dense, hipporag2) and token budget: recall of the gold documents inside what is
returned, (a) plain: passages in rank order while their tokens fit the budget, (b) rse: the segments of
`Memory.segments` within the same budget. Tokens are counted by `engram.tokens` (the offline estimate unless
$ENGRAM_TOKENIZER names a tokenizer). MuSiQue documents are single paragraphs, mostly one passage each, so
segments are mostly single passages here: the comparison measures RSE's choice of passages by value and its
stopping rule, not the joining of adjacent chunks.

    .venv/bin/python bench/bench_rse.py [--data ../shared/data/musique-1890] [--budgets 250,500,1000,2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from engram import Memory
from engram.eval.data import Question, load_corpus, load_questions
from engram.retrieve.rse import RSEParams, top_k_within
from engram.tokens import default_counter

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
BASES = ("dense", "hipporag2")
Row = tuple[float, ...]


def recall(found: Sequence[str], gold: Sequence[str]) -> float:
    return len(set(found) & set(gold)) / len(gold) if gold else 0.0


def plain_at_budget(memory: Memory, questions: list[Question], base: str, budget: int, depth: int) -> list[Row]:
    """(recall, tokens, passages) per question for the top passages that fit `budget`."""
    count = default_counter()
    out: list[Row] = []
    for q, r in zip(questions, memory.retrieve([q.question for q in questions], top_k=depth, method=base)):
        lengths = [count(p.text) for p in r.passages]
        n = top_k_within(lengths, budget)
        out.append((recall([p.doc_id for p in r.passages[:n]], q.gold), sum(lengths[:n]), n))
    return out


def rse_at_budget(memory: Memory, questions: list[Question], base: str, budget: int, params: RSEParams) -> list[Row]:
    """(recall, tokens, passages, segments, multi-passage segments) per question."""
    out: list[Row] = []
    for q, found in zip(questions, memory.segments([q.question for q in questions], base, budget, params)):
        docs = [s.doc_id for s in found.segments]
        passages = sum(len(s.passages) for s in found.segments)
        multi = sum(1 for s in found.segments if len(s.passages) > 1)
        out.append((recall(docs, q.gold), sum(s.tokens for s in found.segments), passages, len(found.segments), multi))
    return out


def mean(rows: list[Row], i: int) -> float:
    return sum(float(r[i]) for r in rows) / len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--memory", type=Path, help="build into / reuse this memory (default: temporary)")
    parser.add_argument("--budgets", default="250,500,1000,2000")
    parser.add_argument(
        "--minimum-values", default="0.5,0", help="RSE's minimum segment value, one run each (0.5: dsRAG's default)"
    )
    args = parser.parse_args()
    if not (args.data / "corpus.jsonl").exists():
        print(f"no data at {args.data}: nothing to measure", file=sys.stderr)
        return 2
    budgets = [int(b) for b in args.budgets.split(",")]
    settings = [RSEParams(minimum_value=float(v)) for v in args.minimum_values.split(",")]
    with tempfile.TemporaryDirectory() as tmp, Memory(args.memory or Path(tmp) / "m", llm=False) as memory:
        start = time.perf_counter()
        memory.index(load_corpus(args.data / "corpus.jsonl"), extractions=args.data / "openie-gpt-3.5-turbo-1106.jsonl")
        stats = memory.stats()
        took = time.perf_counter() - start
        print(f"index: {took:.1f} s; {stats['documents']} documents, {stats['passages']} passages")
        questions = load_questions(args.data / "questions.jsonl")
        print(f"{len(questions)} questions; means per question (R: recall of gold documents, tok: tokens "
              "returned, psg: passages, segs: segments, multi: segments of more than one passage)")
        for params in settings:
            print(f"\nrse {params}")
            print(f"{'base':<10} {'budget':>6} | {'plain R':>7} {'tok':>5} {'psg':>4} | "
                  f"{'rse R':>7} {'tok':>5} {'psg':>4} {'segs':>4} {'multi':>5}")
            for base in BASES:
                for budget in budgets:
                    plain = plain_at_budget(memory, questions, base, budget, params.candidates)
                    rse = rse_at_budget(memory, questions, base, budget, params)
                    print(f"{base:<10} {budget:>6} | {mean(plain, 0):7.3f} {mean(plain, 1):5.0f} "
                          f"{mean(plain, 2):4.1f} | {mean(rse, 0):7.3f} {mean(rse, 1):5.0f} {mean(rse, 2):4.1f} "
                          f"{mean(rse, 3):4.1f} {mean(rse, 4):5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
