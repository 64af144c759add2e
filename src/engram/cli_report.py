"""`engram eval` (methods, ablations, sweeps, IRCoT, reports) and `engram report` (runs side by side)."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram.cli import Bars, say
from engram.errors import InputError, LLMError
from engram.eval.loaders import FORMATS, Dataset, load_dataset
from engram.eval.report import compare_runs, comparison_table, recall_table, write_run
from engram.eval.runner import MethodResult, RunOptions, compare, entities_by_question, plan_methods, run_method
from engram.memory import Memory
from engram.retrieve.run import METHODS
from engram.retrieve.variants import NEEDS_ENTITIES
from engram.settings import resolve_llm


def configure_eval(p: argparse.ArgumentParser, add_common: Callable[..., None]) -> None:
    add_common(p, memory=False)
    p.add_argument(
        "--questions", required=True, help="questions file (JSONL, HippoRAG JSON, raw MuSiQue/2Wiki/HotpotQA)"
    )
    p.add_argument("--corpus", help="corpus file (JSONL {id, title, text} or HippoRAG corpus.json)")
    p.add_argument("--format", default="auto", choices=FORMATS, help="dataset format (default: detected)")
    p.add_argument("--extractions", help="precomputed extractions (JSONL or HippoRAG OpenIE JSON)")
    p.add_argument("--methods", default="hipporag2,dense,bm25", help="comma-separated: " + ",".join(METHODS))
    p.add_argument("--memory", "-m", help="build into / reuse this memory directory (default: a temporary one)")
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--top-k", type=int, default=20, help="retrieval depth recorded per question (default 20)")
    p.add_argument("--query-entities", help="query named entities for hipporag1 / ner-to-node (JSONL or JSON)")
    p.add_argument(
        "--passage-weight",
        action="append",
        default=[],
        help="passage-node weight(s) for hipporag2-style methods; repeat or comma-separate to sweep",
    )
    p.add_argument("--ircot-steps", type=int, default=0, help="also run each method under IRCoT with N steps (LLM)")
    p.add_argument("--qa", action="store_true", help="answer with the LLM reader (top 5) and report EM / F1")
    p.add_argument("--baseline", default="dense", help="row the paired bootstrap compares against (default dense)")
    p.add_argument("--bootstrap-samples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--out", help="write results.json, report.md, details.jsonl and PNG plots into this folder")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    from engram.cli_continual import add_continual_args

    add_continual_args(p)


def configure_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="run directories written by `engram eval --out`")
    p.add_argument("--out", help="also write the comparison (markdown, and a PNG beside it) to this .md file")


def _methods(args: argparse.Namespace) -> list[str]:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    return methods


def _weights(values: list[str]) -> list[float]:
    try:
        return [float(v) for value in values for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise InputError(f"--passage-weight takes numbers: {exc}") from exc


def _check(args: argparse.Namespace, methods: list[str], has_llm: bool) -> None:
    if args.top_k < 1:
        raise InputError("--top-k must be at least 1")
    needs = [m for m in methods if m in NEEDS_ENTITIES]
    if needs and not has_llm and not args.query_entities:
        raise InputError(f"{', '.join(needs)} need query entities: pass --query-entities FILE or configure an LLM")
    if (args.ircot_steps or args.qa) and not has_llm:
        raise LLMError("--ircot-steps and --qa need an LLM: set ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL")
    if args.ircot_steps < 0:
        raise InputError("--ircot-steps must be positive")


def _setup(args: argparse.Namespace, data: Dataset, memory: Memory, methods: list[str]) -> dict[str, Any]:
    return {
        "questions": args.questions,
        "corpus": args.corpus,
        "format": data.format,
        "extractions": args.extractions,
        "methods": methods,
        "depth": args.top_k,
        "embedder": memory.embedder.identity,
        "llm": memory.llm.identity if memory.llm is not None else None,
        "passage_weights": _weights(args.passage_weight) or None,
        "ircot_steps": args.ircot_steps or None,
    }


def _run_eval(args: argparse.Namespace, folder: Path) -> tuple[dict[str, Any], list[MethodResult]]:
    methods = _methods(args)
    data = load_dataset(args.questions, args.corpus, args.format)
    questions = data.questions[: args.limit] if args.limit else data.questions
    llm = resolve_llm(folder, args.llm_base_url, args.llm_model)
    _check(args, methods, llm is not None)
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
            memory.index(data.documents, extractions=args.extractions, progress=bars)
        finally:
            bars.close()
        stats = memory.stats()
        index = {"seconds": round(time.perf_counter() - start, 3)}
        index.update({k: stats[k] for k in ("passages", "phrases", "facts", "edges", "pending")})
        options = RunOptions(depth=args.top_k, qa=args.qa, query_entities=entities)
        memory.embedder.embed(["warm-up"], role="query")  # load the model before any method is timed
        results = []
        for spec in plan_methods(methods, _weights(args.passage_weight), args.ircot_steps):
            results.append(run_method(memory, questions, spec, options))
            say(f"{spec.name}: done ({results[-1].summary['seconds_per_query'] * 1000:.1f} ms/query)")
        result: dict[str, Any] = {"setup": _setup(args, data, memory, methods), "index": index}
    result["methods"] = {r.spec.name: r.summary for r in results}
    result["comparisons"] = compare(results, args.baseline, samples=args.bootstrap_samples)
    return result, results


def cmd_eval(args: argparse.Namespace) -> int:
    if args.continual is not None:
        from engram.cli_continual import cmd_continual

        return cmd_continual(args)
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
    if result["comparisons"]:
        print("\n" + comparison_table(result["comparisons"]))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    text, written = compare_runs(args.runs, args.out)
    print(text, end="")
    if args.out:
        say("wrote " + ", ".join(str(p) for p in written.files))
        if written.plots_skipped:
            say(f"plot skipped: {written.plots_skipped}")
    return 0
