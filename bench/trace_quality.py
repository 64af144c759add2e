"""Per-question traces of a graph method on the shared MuSiQue data: why each passage won.

For each question: the gold passages with their rank under dense and under the method; the candidate facts
(with the passages that state them, GOLD when one is gold); the phrase seeds with their weights and passage
counts; and the top passages, each with its PageRank mass split into what came from the phrase seeds and what
came from the passage seeds (PPR is linear in its reset vector), its dense rank and its degree.

    .venv/bin/python bench/trace_quality.py --memory /tmp/m.engram [--method hipporag2-paper] [--first 0 --last 25]

The memory is built on first use (MiniLM, released GPT-3.5 extractions) and reused. Look at the first 25
questions only when choosing defaults; the last 25 are held out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from engram import Memory
from engram.eval.data import Question, load_corpus, load_questions
from engram.index.view.graph_index import GraphIndex
from engram.retrieve.default import passage_prior
from engram.retrieve.run import retrieve
from engram.retrieve.scoring import min_max, top_k
from engram.text import normalize_phrase

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def reset_for(index: GraphIndex, method: str, seeds: list[tuple[str, float]], dense: np.ndarray, config) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The PPR reset vector the method used (phrase seeds as reported, then its passage seeds)."""
    row_of = {p: i for i, p in enumerate(index.tables.phrases)}
    reset = np.zeros(index.n_phrases + len(index.passages))
    for phrase, weight in seeds:
        reset[row_of[phrase]] += weight
    if method == "hipporag2":
        reset[index.n_phrases :] = passage_prior(index.rankable(dense), config.prior_weight, config.prior_temperature)
    else:
        reset[index.n_phrases :] = min_max(dense) * config.passage_weight
    return reset


def trace(memory: Memory, q: Question, method: str, fact_sources: dict[tuple[str, str, str], set[str]]) -> None:
    ctx = memory.context()
    index, config = ctx.view, ctx.config
    ids = [p.id for p in index.passages]
    result = retrieve(ctx, [q.question], 20, method)[0]
    dense = index.dense_scores(ctx.embed_queries([q.question]))[0]
    dense_order = {ids[r]: i for i, r in enumerate(top_k(index.rankable(dense), len(ids), index.passage_rank))}
    got = [p.id for p in result.passages]
    gold = set(q.gold)
    print(f"\n### {q.id} [{q.hops}] {q.question}\n  answer {q.answers[0]!r}; ranked by {result.method}")
    for g in q.gold:
        print(f"  gold {g}: dense #{dense_order.get(g, -1)}, {method} #{got.index(g) if g in got else '>20'}")
    for f in result.candidate_facts:
        sources = fact_sources.get(f.triple, set())
        kept = "kept" if f in result.facts else "dropped"
        print(f"  fact {f.score:.3f} {kept} {f.triple} from {sorted(sources)[:3]}{' GOLD' if sources & gold else ''}")
    counts = dict(zip(index.tables.phrases, index.phrase_passage_counts.tolist()))
    for s in result.seeds:
        print(f"  seed {s.weight:.3f} {s.phrase!r} in {int(counts.get(s.phrase, 0))} passages")
    if result.method == "dense":
        return
    reset = reset_for(index, method, [(s.phrase, s.weight) for s in result.seeds], dense, config)
    n = index.n_phrases
    phrase_part, passage_part = reset.copy(), reset.copy()
    phrase_part[n:], passage_part[:n] = 0.0, 0.0
    total = reset.sum()
    from_phrases = index.ppr(phrase_part, config.damping)[n:] * phrase_part.sum() / total
    from_passages = index.ppr(passage_part, config.damping)[n:] * passage_part.sum() / total
    degree = np.bincount(index.tables.context[:, 0], minlength=len(ids))
    for p in result.passages[:5]:
        row = ids.index(p.id)
        print(f"  top {p.id}{'*' if p.id in gold else ' '} mass {p.score:.5f} = phrases {from_phrases[row]:.5f}"
              f" + passages {from_passages[row]:.5f}; dense #{dense_order[p.id]} ({dense[row]:.3f}); "
              f"{degree[row]} phrases; {(p.title or '')[:40]}")


def fact_sources(path: Path) -> dict[tuple[str, str, str], set[str]]:
    from engram.eval.data import read_jsonl

    out: dict[tuple[str, str, str], set[str]] = {}
    for row in read_jsonl(path):
        for t in row.get("triples", []):
            if isinstance(t, list) and len(t) == 3:
                key = (normalize_phrase(str(t[0])), normalize_phrase(str(t[1])), normalize_phrase(str(t[2])))
                out.setdefault(key, set()).add(str(row["id"]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--extractions", type=Path, help="default: the released GPT-3.5 extractions")
    parser.add_argument("--memory", type=Path, required=True, help="memory directory (built on first use)")
    parser.add_argument("--method", default="hipporag2", choices=["hipporag2", "hipporag2-paper"])
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--last", type=int, default=25, help="questions [first, last) (default: the tuning half)")
    args = parser.parse_args()
    if not (args.data / "corpus.jsonl").exists():
        print(f"no data at {args.data}", file=sys.stderr)
        return 2
    extractions = args.extractions or args.data / "openie-gpt-3.5-turbo-1106.jsonl"
    with Memory(args.memory, llm=False) as memory:
        if not memory.context().view.passage_alive.any():
            memory.index(load_corpus(args.data / "corpus.jsonl"), extractions=extractions)
        sources = fact_sources(extractions)
        for q in load_questions(args.data / "questions.jsonl")[args.first : args.last]:
            trace(memory, q, args.method, sources)
    return 0


if __name__ == "__main__":
    sys.exit(main())
