"""`engram eval` (methods, ablations, sweeps, IRCoT, reports) and `engram report` (runs side by side)."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram.cli.common import Bars, command, say
from engram.cli.eval_args import add_eval_args, baseline, check_args, parse_methods, parse_weights, run_setup
from engram.eval.loaders import check_gold, load_dataset

if TYPE_CHECKING:
    from engram.eval.runner import MethodResult


def configure_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="run directories written by `engram eval --out`")
    p.add_argument("--out", help="also write the comparison (markdown, and a PNG beside it) to this .md file")


def _run_eval(args: argparse.Namespace, folder: Path) -> tuple[dict[str, Any], list[MethodResult]]:
    from engram.cli.eval_peers import index_peers, openie_cost, run_costed
    from engram.eval.runner import RunOptions, compare, entities_by_question, plan_methods
    from engram.memory import Memory
    from engram.settings import resolve_llm

    methods = parse_methods(args)
    data = load_dataset(args.questions, args.corpus, args.format)
    questions = data.questions[: args.limit] if args.limit else data.questions
    llm = resolve_llm(folder, args.llm_base_url, args.llm_model)
    check_args(args, methods, llm is not None)
    plan = plan_methods(methods, parse_weights(args.passage_weight), args.ircot_steps)
    against = baseline(args, [spec.name for spec in plan])
    check_gold(data, args.questions, needed=not args.qa)
    if llm is None and any(m.startswith("hipporag2") for m in methods):
        say("no LLM configured: the hipporag2 recognition filter is skipped")
    if data.unmatched_gold:
        say(f"{data.unmatched_gold} supporting paragraphs matched no corpus passage and were left out of the gold")
    entities = None
    if args.query_entities:
        from engram.retrieve.query_ner import load_query_entities

        entities = entities_by_question(questions, load_query_entities(args.query_entities))
    bars = Bars(args.progress)
    with Memory(folder, embedder=args.embedder, llm=llm) as memory:
        start = time.perf_counter()
        try:
            report = memory.index(data.documents, extractions=args.extractions, progress=bars)
        finally:
            bars.close()
        openie = openie_cost(report, time.perf_counter() - start)
        stats = memory.stats()
        index = {"seconds": round(time.perf_counter() - start, 3)}
        index.update({k: stats[k] for k in ("passages", "phrases", "facts", "edges", "pending")})
        peers = index_peers(memory, methods, bars)  # their time and tokens: each method's "cost"
        options = RunOptions(depth=args.top_k, qa=args.qa, query_entities=entities)
        memory.embedder.embed(["warm-up"], role="query")  # load the model before any method is timed
        results = []
        for spec in plan:
            results.append(run_costed(memory, questions, spec, options, openie, peers))
            say(f"{spec.name}: done ({results[-1].summary['seconds_per_query'] * 1000:.1f} ms/query)")
        result: dict[str, Any] = {"setup": run_setup(args, data, memory, methods), "index": index}
    result["methods"] = {r.spec.name: r.summary for r in results}
    result["comparisons"] = compare(results, against, samples=args.bootstrap_samples)
    return result, results


def cmd_eval(args: argparse.Namespace) -> int:
    if args.continual is not None:
        from engram.cli.continual import cmd_continual

        return cmd_continual(args)
    from engram.cli.eval_peers import dry_run
    from engram.eval.costs import cost_table
    from engram.eval.report import comparison_table, recall_table, write_run

    if args.dry_run:
        return dry_run(args, load_dataset(args.questions, args.corpus, args.format), parse_methods(args))
    if args.memory:
        result, runs = _run_eval(args, Path(args.memory))
    else:
        with tempfile.TemporaryDirectory(prefix="engram-eval-") as tmp:
            result, runs = _run_eval(args, Path(tmp) / "memory")
    if args.out:
        written = write_run(args.out, result, [row for run in runs for row in run.details])
        say("wrote " + ", ".join(str(p) for p in written.files))
        if written.plots_skipped:
            say(f"plots skipped: {written.plots_skipped}")
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"index: {json.dumps(result['index'])}\n")
    print(recall_table(result["methods"]))
    costs = cost_table(result["methods"])
    if costs:
        print("\ncost (HippoRAG 2 paper, Table 12 layout):\n" + costs)
    if result["comparisons"]:
        print("\n" + comparison_table(result["comparisons"]))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from engram.eval.report import compare_runs

    text, written = compare_runs(args.runs, args.out)
    print(text, end="")
    if args.out:
        say("wrote " + ", ".join(str(p) for p in written.files))
        if written.plots_skipped:
            say(f"plot skipped: {written.plots_skipped}")
    return 0


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    evaluate = command(
        sub,
        "eval",
        "measure recall on a corpus with gold passages",
        "Indexes the corpus (into --memory, else a temporary memory), retrieves for every question with each\n"
        "method, and reports recall@k (with --qa, exact match and F1 of the reader) and paired comparisons.",
        """engram eval --corpus corpus.jsonl --questions questions.jsonl --extractions openie.jsonl --json
engram eval --corpus corpus.jsonl --questions questions.jsonl --methods hipporag2,dense --out runs/a
engram eval --corpus corpus.jsonl --questions questions.jsonl --continual 4""",
    )
    add_eval_args(evaluate)
    evaluate.set_defaults(func=cmd_eval)
    report = command(
        sub,
        "report",
        "compare eval runs (folders from `engram eval --out`)",
        "Puts the methods and metrics of the runs side by side.",
        """engram report runs/a runs/b
engram report runs/a runs/b --out comparison.md""",
    )
    configure_report(report)
    report.set_defaults(func=cmd_report)
