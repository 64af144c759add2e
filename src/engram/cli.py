"""The `engram` command line: a thin layer over the library. It owns output, progress bars and exit codes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engram.cli_llm import add_run_args, memory_for_estimate, print_estimate, report_llm
from engram.errors import EngramError
from engram.memory import Memory
from engram.settings import resolve_llm
from engram.types import IndexReport, Retrieval


class Bars:
    """tqdm progress bars keyed by stage, on stderr, only when it is a terminal (unless --progress)."""

    def __init__(self, enabled: bool | None) -> None:
        self.enabled = enabled
        self.bars: dict[str, Any] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        from tqdm import tqdm

        bar = self.bars.get(stage)
        if bar is None:
            disable = None if self.enabled is None else not self.enabled
            bar = self.bars[stage] = tqdm(total=total, desc=stage, unit="", file=sys.stderr, disable=disable)
        bar.total = total
        bar.n = done
        bar.refresh()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()


def say(message: str) -> None:
    print(message, file=sys.stderr)


def open_memory(args: argparse.Namespace, create: bool = False) -> Memory:
    path = Path(args.memory)
    llm = resolve_llm(path, args.llm_base_url, args.llm_model, max_concurrency=getattr(args, "llm_concurrency", None))
    return Memory(path, embedder=args.embedder, llm=llm, create=create)


def report_index(report: IndexReport) -> None:
    s = report.stats
    say(
        f"indexed {report.documents} documents ({report.passages} new passages, {report.unchanged} unchanged); "
        f"memory: {s.get('passages', 0)} passages, {s.get('phrases', 0)} phrases, {s.get('facts', 0)} facts, "
        f"{s.get('edges', 0)} edges"
    )
    if report.imported or report.extracted or report.failed:
        say(f"extractions: {report.imported} imported, {report.extracted} by the LLM, {report.failed} failed")
    if report.dropped_triples:
        say(f"dropped {report.dropped_triples} malformed triples")
    for doc_id, reason in report.skipped.items():
        say(f"skipped {doc_id}: {reason}")
    if report.pending and not report.budget_reached:
        say(
            f"{report.pending} passages are pending extraction (no LLM configured): dense and BM25 find them; "
            "run `engram extract` once an LLM is configured"
        )


def cmd_index(args: argparse.Namespace) -> int:
    from engram.sources import collect

    collected = collect(args.paths)
    for path, reason in collected.skipped.items():
        say(f"skipped {path}: {reason}")
    if args.dry_run:
        with memory_for_estimate(args, open_memory) as memory:
            estimate = memory.estimate(
                collected.documents, extractions=args.extractions, max_input_tokens=args.max_input_tokens
            )
            print_estimate(estimate, memory.llm)
        return 0
    bars = Bars(args.progress)
    with open_memory(args, create=True) as memory:
        try:
            report = memory.index(
                collected.documents,
                extractions=args.extractions,
                progress=bars,
                max_tokens=args.max_tokens,
                max_input_tokens=args.max_input_tokens,
            )
        finally:
            bars.close()
    report_index(report)
    report_llm(report)
    return 0


def cmd_extract(args: argparse.Namespace) -> int:
    if args.dry_run:
        with open_memory(args) as memory:
            print_estimate(memory.estimate(), memory.llm)
        return 0
    bars = Bars(args.progress)
    with open_memory(args) as memory:
        try:
            report = memory.extract(progress=bars, max_tokens=args.max_tokens)
        finally:
            bars.close()
    report_index(report)
    report_llm(report)
    return 0


def retrieval_json(r: Retrieval) -> dict[str, Any]:
    return {
        "query": r.query,
        "method": r.method,
        "passages": [asdict(p) for p in r.passages],
        "facts": [[*f.triple, f.score] for f in r.facts],
        "seeds": [[s.phrase, s.weight] for s in r.seeds],
        "filtered": r.filtered,
        "pending": r.pending,
    }


def print_retrieval(r: Retrieval) -> None:
    print(f"? {r.query}   [{r.method}]")
    for rank, p in enumerate(r.passages, start=1):
        title = f"{p.title}: " if p.title else ""
        snippet = (title + p.text).replace("\n", " ")
        print(f"  {rank}. [{p.id}] {p.score:.4f}  {snippet[:140]}")
    if r.facts:
        print("  facts: " + "; ".join(f"({f.subject} | {f.relation} | {f.object})" for f in r.facts))
    if r.seeds:
        print("  seeds: " + ", ".join(f"{s.phrase} ({s.weight:.3f})" for s in r.seeds))


def _queries(args: argparse.Namespace) -> list[str]:
    from engram.eval.data import load_questions

    queries = list(args.query or [])
    if args.questions:
        queries += [q.question for q in load_questions(args.questions)]
    if not queries:
        raise EngramError("give a question, or --questions FILE.jsonl")
    return queries[: args.limit] if args.limit else queries


def cmd_retrieve(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        if memory.llm is None and args.method == "hipporag2":
            say("no LLM configured: the recognition filter is skipped")
        results = memory.retrieve(_queries(args), top_k=args.top_k, method=args.method)
    for r in results:
        if args.json:
            print(json.dumps(retrieval_json(r), ensure_ascii=False))
        else:
            print_retrieval(r)
    if results and results[0].pending and not args.json:
        say(f"note: {results[0].pending} passages are pending extraction")
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        answers = memory.answer(_queries(args), top_k=args.top_k, method=args.method)
    for a in answers:
        if args.json:
            print(
                json.dumps(
                    {
                        "query": a.query,
                        "answer": a.answer,
                        "passages": [p.id for p in a.passages],
                        "facts": [list(f.triple) for f in a.facts],
                    },
                    ensure_ascii=False,
                )
            )
        else:
            print(f"? {a.query}\n{a.answer}")
            print("  from: " + ", ".join(p.id for p in a.passages))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        print(json.dumps(memory.stats(), indent=2, sort_keys=True))
    return 0


def add_common(p: argparse.ArgumentParser, memory: bool = True) -> None:
    if memory:
        p.add_argument("--memory", "-m", required=True, help="memory directory")
    p.add_argument("--embedder", help="embedder spec (default: $ENGRAM_EMBEDDER or all-MiniLM-L6-v2)")
    p.add_argument("--llm-base-url", help="OpenAI-compatible base URL (default: $ENGRAM_LLM_BASE_URL)")
    p.add_argument("--llm-model", help="chat model name (default: $ENGRAM_LLM_MODEL)")
    p.add_argument("--llm-concurrency", type=int, help="LLM requests in flight at most ($ENGRAM_LLM_CONCURRENCY, 8)")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars (default: when stderr is a terminal)",
    )


def add_query_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", nargs="*", help="question(s)")
    p.add_argument("--questions", help="JSONL file with a 'question' per row")
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--top-k", type=int, default=5)
    from engram.retrieve.run import METHODS

    p.add_argument("--method", default="hipporag2", choices=METHODS)
    p.add_argument("--json", action="store_true", help="one JSON object per line")


def build_parser() -> argparse.ArgumentParser:
    from engram.cli_eval import cmd_demo
    from engram.cli_report import cmd_eval, cmd_report, configure_eval, configure_report

    parser = argparse.ArgumentParser(prog="engram", description="Long-term memory for LLMs (HippoRAG 2).")
    sub = parser.add_subparsers(dest="command", required=True)
    commands: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
        ("index", "add documents (files, folders, .jsonl/.json corpora)", cmd_index),
        ("extract", "run the LLM on pending and failed passages", cmd_extract),
        ("retrieve", "rank passages for questions", cmd_retrieve),
        ("ask", "answer questions with the LLM reader", cmd_ask),
        ("stats", "what the memory holds", cmd_stats),
    ]
    for name, help_text, func in commands:
        p = sub.add_parser(name, help=help_text)
        add_common(p)
        p.set_defaults(func=func)
        if name == "index":
            p.add_argument("paths", nargs="+", help="files or folders")
            p.add_argument("--extractions", help="precomputed extractions (JSONL or HippoRAG OpenIE JSON)")
        if name in ("index", "extract"):
            add_run_args(p, chunking=name == "index")
        if name in ("retrieve", "ask"):
            add_query_args(p)
    from engram.cli_sync import configure as configure_sync

    configure_sync(sub, add_common)
    demo = sub.add_parser("demo", help="an offline demo on a bundled corpus")
    add_common(demo, memory=False)
    demo.set_defaults(func=cmd_demo)
    configure_eval(sub.add_parser("eval", help="measure recall on a corpus with gold passages"), add_common)
    sub.choices["eval"].set_defaults(func=cmd_eval)
    configure_report(sub.add_parser("report", help="compare eval runs (folders from `engram eval --out`)"))
    sub.choices["report"].set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except EngramError as exc:
        say(f"engram: error: {exc}")
        return 1
    except KeyboardInterrupt:
        say("engram: interrupted; finished work is saved, run the command again to resume")
        return 130


if __name__ == "__main__":
    sys.exit(main())
