"""`engram demo` (`engram eval` and `engram report` are in `engram.cli.evaluate`)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from engram.cli.common import add_common, command, print_retrieval
from engram.types import Retrieval

if TYPE_CHECKING:
    from engram.memory import Memory


def _demo_files() -> tuple[Path, Path, Path]:
    base = resources.files("engram") / "data"
    return (
        Path(str(base / "demo_corpus.jsonl")),
        Path(str(base / "demo_extractions.jsonl")),
        Path(str(base / "demo_questions.jsonl")),
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from engram.eval.data import load_corpus, load_questions
    from engram.memory import Memory

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


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = command(
        sub,
        "demo",
        "an offline demo on a bundled corpus",
        "Indexes a small bundled corpus with hand-written extractions (no LLM) into a temporary memory and\n"
        "shows, for a few multi-hop questions, dense retrieval beside HippoRAG 2.",
        """engram demo
engram demo --embedder minilm:torch""",
    )
    add_common(demo, memory=False, llm=False, progress=False)
    demo.set_defaults(func=cmd_demo)
