"""The default method (`hipporag2`) with each of its last changes switched off, and each of its settings moved
one step either way (fact and prior temperatures, weights, fact count, seeds, damping), on the shared MuSiQue data:
recall@1/2/5/10 on the first 25 questions (where defaults are chosen), the last 25 (held out) and all 50, with
dense retrieval beside. The memory is built on first use (MiniLM, released GPT-3.5 extractions) and reused.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/ablate_default.py --memory /tmp/m.engram [--part first]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from engram import Memory, RetrieveConfig
from engram.eval.data import Question, load_corpus, load_questions
from engram.eval.metrics import mean, recall_at_k
from engram.eval.runner import ranked_documents

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
KS = (1, 2, 5, 10)
VARIANTS: dict[str, dict[str, bool | float | None]] = {
    "hipporag2 (default)": {},
    "  without inner_name_weight": {"inner_name_weight": 0.0},
    "  without fact_temperature": {"fact_temperature": None},
    "  without dense_first": {"dense_first": False},
    "  without named_links": {"named_links": False},
    "  without all four (before)": {
        "dense_first": False, "named_links": False, "fact_temperature": None, "inner_name_weight": 0.0
    },
    "  fact_temperature 0.01": {"fact_temperature": 0.01},
    "  fact_temperature 0.05": {"fact_temperature": 0.05},
    "  fact_temperature 0.1": {"fact_temperature": 0.1},
    "  inner_name_weight 0.05": {"inner_name_weight": 0.05},
    "  inner_name_weight 0.1": {"inner_name_weight": 0.1},
    "  inner_name_weight 0.25": {"inner_name_weight": 0.25},
    "  inner_name_weight 0.3": {"inner_name_weight": 0.3},
    "  inner_name_weight 0.5": {"inner_name_weight": 0.5},
    "  prior_temperature 0.01": {"prior_temperature": 0.01},
    "  prior_temperature 0.03": {"prior_temperature": 0.03},
    "  prior_temperature 0.05": {"prior_temperature": 0.05},
    "  prior_weight 0.1": {"prior_weight": 0.1},
    "  prior_weight 0.3 (before)": {"prior_weight": 0.3},
    "  prior_weight 0.75": {"prior_weight": 0.75},
    "  fact_seed_weight 0.25": {"fact_seed_weight": 0.25},
    "  fact_seed_weight 1": {"fact_seed_weight": 1.0},
    "  seed_fact_top_k 5": {"seed_fact_top_k": 5},
    "  max_seeds 10": {"max_seeds": 10},
    "  without node_specificity": {"node_specificity": False},
    "  damping 0.4": {"damping": 0.4},
    "  damping 0.6": {"damping": 0.6},
    "  lexical_weight 0 (before)": {"lexical_weight": 0.0},
    "  lexical_weight 0.1": {"lexical_weight": 0.1},
    "  lexical_weight 0.3": {"lexical_weight": 0.3},
}


def ranked(memory: Memory, questions: list[Question], method: str, config: RetrieveConfig) -> list[list[str]]:
    return [ranked_documents(r) for r in memory.retrieve([q.question for q in questions], 40, method, config=config)]


def recalls(rankings: list[list[str]], questions: list[Question]) -> list[float]:
    return [mean([recall_at_k(d, q.gold, k) for d, q in zip(rankings, questions)]) for k in KS]


def rrf(a: list[str], b: list[str], k: int = 60) -> list[str]:
    """Reciprocal-rank fusion (Cormack et al. 2009, k = 60) of two rankings."""
    score: dict[str, float] = {}
    for ranking in (a, b):
        for rank, doc in enumerate(ranking):
            score[doc] = score.get(doc, 0.0) + 1.0 / (k + rank + 1)
    return sorted(score, key=lambda doc: -score[doc])


def fact_spread(memory: Memory, subset: list[Question]) -> str:
    """Medians over the questions: how far the third fact's score is below the best one, and the lowest score of
    every fact (what min-max divides by)."""
    ctx = memory.context()
    scores = np.sort(ctx.view.fact_scores(ctx.embed_queries([q.question for q in subset])), axis=1)[:, ::-1]
    return (f"fact scores, medians: best - third {float(np.median(scores[:, 0] - scores[:, 2])):.3f}, "
            f"lowest {float(np.median(scores[:, -1])):.3f}")  # fmt: skip


def report(memory: Memory, subset: list[Question]) -> None:
    base = memory.config.retrieve
    print(f"{'method':<34}" + "".join(f"{'R@' + str(k):>7}" for k in KS))
    found = {name: ranked(memory, subset, "hipporag2", replace(base, **changes)) for name, changes in VARIANTS.items()}
    dense = ranked(memory, subset, "dense", base)
    found["rrf(before, dense), k=60"] = [rrf(g, d) for g, d in zip(found["  without all four (before)"], dense)]
    found["dense"] = dense
    found["bm25"] = ranked(memory, subset, "bm25", base)
    found["hybrid (significance fusion)"] = ranked(memory, subset, "hybrid", base)
    found["hybrid (weighted: the prior's)"] = ranked(memory, subset, "hybrid", replace(base, fusion="weighted"))
    for name, rankings in found.items():
        print(f"{name:<34}" + "".join(f"{v:7.3f}" for v in recalls(rankings, subset)))
    differ = sum(g[0] != d[0] for g, d in zip(found["  without dense_first"], dense))
    print(f"top passage of 'without dense_first' differs from dense's in {differ} of {len(subset)} questions")
    print(fact_spread(memory, subset))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--memory", type=Path, required=True, help="memory directory (built on first use)")
    parser.add_argument("--part", choices=["first", "last", "all"], action="append",
                        help="question sets to report (default: first, last, all)")
    args = parser.parse_args()
    if not (args.data / "corpus.jsonl").exists():
        print(f"no data at {args.data}", file=sys.stderr)
        return 2
    questions = load_questions(args.data / "questions.jsonl")
    half = len(questions) // 2
    parts = {"first": questions[:half], "last": questions[half:], "all": questions}
    with Memory(args.memory, llm=False) as memory:
        if not memory.context().view.passage_alive.any():
            memory.index(load_corpus(args.data / "corpus.jsonl"),
                         extractions=args.data / "openie-gpt-3.5-turbo-1106.jsonl")
        for part in args.part or ["first", "last", "all"]:
            print(f"\n{part} ({len(parts[part])} questions)")
            report(memory, parts[part])
    return 0


if __name__ == "__main__":
    sys.exit(main())
