"""`engram eval` and `engram demo`."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from engram.cli import Bars, print_retrieval, say
from engram.errors import InputError
from engram.eval.data import load_corpus, load_questions
from engram.eval.runner import score_method
from engram.memory import Memory
from engram.retrieve.run import METHODS
from engram.settings import resolve_llm
from engram.types import Retrieval


def configure_eval(p: argparse.ArgumentParser, add_common: Callable[..., None]) -> None:
    add_common(p, memory=False)
    p.add_argument("--corpus", required=True, help="JSONL corpus: {id, title, text} per line")
    p.add_argument("--questions", required=True, help="JSONL questions: {question, gold: [passage ids]}")
    p.add_argument("--extractions", help="precomputed extractions (JSONL or HippoRAG OpenIE JSON)")
    p.add_argument("--methods", default="hipporag2,dense,bm25", help="comma-separated: " + ",".join(METHODS))
    p.add_argument("--memory", "-m", help="build into / reuse this memory directory (default: a temporary one)")
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _run_eval(args: argparse.Namespace, folder: Path) -> dict[str, object]:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    questions = load_questions(args.questions)[: args.limit] if args.limit else load_questions(args.questions)
    llm = resolve_llm(folder, args.llm_base_url, args.llm_model)
    if llm is None and "hipporag2" in methods:
        say("no LLM configured: the hipporag2 recognition filter is skipped")
    bars = Bars(args.progress)
    with Memory(folder, embedder=args.embedder, llm=llm) as memory:
        start = time.perf_counter()
        try:
            memory.index(load_corpus(args.corpus), extractions=args.extractions, progress=bars)
        finally:
            bars.close()
        index_seconds = time.perf_counter() - start
        stats = memory.stats()
        out: dict[str, object] = {
            "index": {
                "seconds": round(index_seconds, 3),
                **{k: stats[k] for k in ("passages", "phrases", "facts", "edges", "pending")},
            },
            "methods": {m: score_method(memory, questions, m)[0] for m in methods},
        }
    return out


def cmd_eval(args: argparse.Namespace) -> int:
    if args.memory:
        result = _run_eval(args, Path(args.memory))
    else:
        with tempfile.TemporaryDirectory(prefix="engram-eval-") as tmp:
            result = _run_eval(args, Path(tmp) / "memory")
    if args.json:
        print(json.dumps(result))
        return 0
    index = result["index"]
    print(f"index: {json.dumps(index)}")
    methods = result["methods"]
    assert isinstance(methods, dict)
    for name, summary in methods.items():
        recall = "  ".join(f"R@{k} {v:.3f}" for k, v in summary["recall"].items())
        print(
            f"{name:<10} {recall}  all@5 {summary['all_recall']['5']:.3f}  "
            f"{summary['seconds_per_query'] * 1000:.1f} ms/query"
        )
    return 0


def _demo_files() -> tuple[Path, Path, Path]:
    base = resources.files("engram") / "data"
    return (
        Path(str(base / "demo_corpus.jsonl")),
        Path(str(base / "demo_extractions.jsonl")),
        Path(str(base / "demo_questions.jsonl")),
    )


def cmd_demo(args: argparse.Namespace) -> int:
    corpus, extractions, questions_file = _demo_files()
    questions = load_questions(questions_file)
    with tempfile.TemporaryDirectory(prefix="engram-demo-") as tmp, Memory(
        Path(tmp) / "demo", embedder=args.embedder
    ) as memory:
        report = memory.index(load_corpus(corpus), extractions=extractions)
        s = report.stats
        print(
            f"Indexed {s['passages']} passages with hand-written extractions (fixtures, no LLM): "
            f"{s['phrases']} phrases, {s['facts']} facts, {s['edges']} edges.\n"
        )
        for q in questions:
            dense = memory.retrieve(q.question, top_k=3, method="dense")[0]
            graph = memory.retrieve(q.question, top_k=3)[0]
            print(f"Question: {q.question}   (answer: {', '.join(q.answers[:1])}; needs {', '.join(q.gold)})")
            print("-- dense retrieval (embeddings only):")
            print_retrieval(dense)
            print("-- engram (HippoRAG 2 graph search):")
            print_retrieval(graph)
            _print_path(memory, graph, dense)
            print()
    sys.stdout.flush()
    return 0


def _print_path(memory: Memory, graph: Retrieval, dense: Retrieval) -> None:
    """Show how the graph reached passages dense retrieval missed: a kept fact joins a seed phrase to a phrase
    of the passage (or is the seed itself), and PageRank flows along it."""
    dense_ids = {p.id for p in dense.passages}
    seeds = {s.phrase for s in graph.seeds}
    for passage in graph.passages:
        if passage.id in dense_ids:
            continue
        linked = set(memory.phrases_of(passage.id))
        for f in graph.facts:
            ends = {f.subject, f.object}
            if ends & seeds and ends & linked:
                seed = sorted(ends & seeds)[0]
                bridge = sorted(ends & linked)[0]
                print(f"   path: seed phrase '{seed}' -> fact ({f.subject} | {f.relation} | {f.object}) -> "
                      f"'{bridge}' -> passage {passage.id} (not in the dense top {len(dense.passages)})")
                break
