"""`engram retrieve`, `engram ask` and `engram stats`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from engram.cli.common import add_common, command, open_memory, print_retrieval, retrieval_json, say
from engram.errors import EngramError
from engram.retrieve.method_names import METHODS

DEFAULT_BUDGET = 6000  # tokens of all segments per question: Memory.segments' default


def _asked(args: argparse.Namespace) -> list[tuple[str | None, str]]:
    """(question id, question) in order: questions typed on the command line have no id, those of
    --questions FILE the id of their row, which the --json rows carry back."""
    from engram.eval.data import load_questions

    asked: list[tuple[str | None, str]] = [(None, q) for q in args.query or []]
    if args.questions:
        asked += [(q.id, q.question) for q in load_questions(args.questions)]
    if not asked:
        raise EngramError("give a question, or --questions FILE.jsonl")
    if args.limit is not None and args.limit < 1:
        raise EngramError("--limit must be at least 1 (leave it out for every question)")
    return asked[: args.limit] if args.limit else asked


def _with_id(question_id: str | None, row: dict[str, Any]) -> dict[str, Any]:
    return row if question_id is None else {"id": question_id, **row}


def cmd_retrieve(args: argparse.Namespace) -> int:
    if args.segments:
        return _print_segments(args)
    if args.budget_tokens is not None:
        raise EngramError("--budget-tokens sizes the segments of --segments: add --segments, or drop it")
    asked = _asked(args)
    with open_memory(args) as memory:
        if memory.llm is None and args.method == "hipporag2":
            say("no LLM configured: the recognition filter is skipped")
        results = memory.retrieve([q for _, q in asked], top_k=args.top_k, method=args.method)
    for (question_id, _), r in zip(asked, results):
        if args.json:
            print(json.dumps(_with_id(question_id, retrieval_json(r)), ensure_ascii=False))
        else:
            print_retrieval(r)
    if results and results[0].pending and not args.json:
        say(f"note: {results[0].pending} passages are pending extraction")
    return 0


def _print_segments(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        budget = DEFAULT_BUDGET if args.budget_tokens is None else args.budget_tokens
        asked = _asked(args)
        found = memory.segments([q for _, q in asked], base=args.method, budget_tokens=budget)
    for (question_id, _), result in zip(asked, found):
        rows = [
            {
                "doc_id": s.doc_id,
                "title": s.title,
                "passages": [p.id for p in s.passages],
                "value": round(s.value, 4),
                "tokens": s.tokens,
                "text": s.text,
            }
            for s in result.segments
        ]
        if args.json:
            row = {"query": result.query, "base": result.base, "segments": rows}
            print(json.dumps(_with_id(question_id, row), ensure_ascii=False))
            continue
        print(f"? {result.query}  ({len(rows)} segments over {result.base})")
        for seg in result.segments:
            print(
                f"  [{seg.value:.3f}] {seg.title or seg.doc_id} ({', '.join(p.id for p in seg.passages)}; "
                f"{seg.tokens} tokens)\n    {seg.text[:300]}"
            )
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    asked = _asked(args)
    with open_memory(args) as memory:
        answers = memory.answer([q for _, q in asked], top_k=args.top_k, method=args.method)
    for (question_id, _), a in zip(asked, answers):
        if args.json:
            row = {
                "query": a.query,
                "answer": a.answer,
                "passages": [p.id for p in a.passages],
                "facts": [list(f.triple) for f in a.facts],
            }
            print(json.dumps(_with_id(question_id, row), ensure_ascii=False))
        else:
            print(f"? {a.query}\n{a.answer}")
            print("  from: " + ", ".join(p.id for p in a.passages))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """Stats are JSON either way; `--json` is accepted as every other command that prints JSON takes it."""
    with open_memory(args) as memory:
        print(json.dumps(memory.stats(), indent=2, sort_keys=True))
    return 0


def add_query_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", nargs="*", help="question(s)")
    p.add_argument("--questions", help="JSONL file with a 'question' per row")
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--top-k", type=int, default=5, metavar="K", help="passages to return per question (default: 5)")
    p.add_argument("--method", default="hipporag2", choices=METHODS)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    if p.prog.endswith("retrieve"):
        p.add_argument(
            "--segments",
            action="store_true",
            help="runs of adjacent passages (relevant segment extraction) over the --method ranking "
            "(hipporag2, hipporag2-paper, dense or bm25)",
        )
        p.add_argument(
            "--budget-tokens",
            type=int,
            metavar="N",
            help=f"with --segments: tokens of all segments per question (default: {DEFAULT_BUDGET})",
        )


EXAMPLES = {
    "retrieve": """engram retrieve "Where was the founder of Acme born?" --memory my.engram
engram retrieve --questions questions.jsonl --memory my.engram --json --top-k 10
engram retrieve "Acme" --memory my.engram --method dense
engram retrieve "Acme" --memory my.engram --segments --method dense --budget-tokens 1000""",
    "ask": """engram ask "Where was the founder of Acme born?" --memory my.engram
engram ask --questions questions.jsonl --memory my.engram --json""",
}
DETAILS = {
    "retrieve": "Prints the passages, the facts that seeded the graph search, and, when a graph method fell back "
    "to dense ranking, why\n(no facts yet, no fact survived the recognition filter, ...). Without an LLM the "
    "recognition filter is skipped.",
    "ask": "Retrieves, then the LLM reads the top passages and answers (needs an LLM).",
}


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, help_text, func in (
        ("retrieve", "rank passages for questions", cmd_retrieve),
        ("ask", "answer questions with the LLM reader", cmd_ask),
    ):
        p = command(sub, name, help_text, DETAILS[name], EXAMPLES[name])
        add_common(p, progress=False)
        add_query_args(p)
        p.set_defaults(func=func)
    stats = command(
        sub,
        "stats",
        "what the memory holds",
        "Documents, passages, phrases, facts, edges, pending and failed extractions, and the LLM usage so far, "
        "as JSON.",
        """engram stats --memory my.engram
engram stats --memory my.engram --json | jq .facts""",
    )
    add_common(stats, llm=False, progress=False)
    stats.add_argument("--json", action="store_true", help="JSON (the only format stats print; for scripts)")
    stats.set_defaults(func=cmd_stats)
