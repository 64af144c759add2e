"""The peer methods and costs in `engram eval`: indexing the peers a run asks for, each method's cost beside its
recall, and `--dry-run` (each method's indexing requests and input tokens for the corpus, nothing spent)."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram.cli.common import Bars, say
from engram.eval.costs import NO_LLM, index_cost, query_cost
from engram.eval.data import Question
from engram.eval.loaders import Dataset
from engram.eval.runner import MethodResult, MethodSpec, RunOptions, run_method
from engram.llm.usage import usage_of
from engram.memory import Memory
from engram.retrieve.peers import PEERS
from engram.types import IndexReport


def index_peers(memory: Memory, methods: Sequence[str], bars: Bars) -> dict[str, dict[str, Any]]:
    """Add the peer methods of `methods` to the memory (resuming what an earlier run left); their costs."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(m for m in methods if m in PEERS):
        try:
            done = memory.add_method(name, progress=bars)
        finally:
            bars.close()
        if done.failed:
            say(f"{name}: {done.failed} chunks failed extraction (left out of its index; a re-run retries them)")
        out[name] = memory.method_costs(name)
    return out


def openie_cost(report: IndexReport, seconds: float) -> dict[str, Any]:
    return {"llm": dict(report.llm), "seconds": seconds}


def run_costed(
    memory: Memory,
    questions: Sequence[Question],
    spec: MethodSpec,
    options: RunOptions,
    openie: dict[str, Any],
    peers: dict[str, dict[str, Any]],
) -> MethodResult:
    """`run_method`, with the method's indexing and query costs in `summary["cost"]`."""
    before = usage_of(memory.llm)
    result = run_method(memory, questions, spec, options)
    spent = usage_of(memory.llm) - before
    cost = index_cost(spec.method, openie, peers.get(spec.method))
    cost.update(query_cost(spent.tokens, len(questions), result.summary["seconds_per_query"]))
    result.summary["cost"] = {k: round(v, 6) for k, v in cost.items()}
    return result


def dry_run(args: argparse.Namespace, data: Dataset, methods: Sequence[str]) -> int:
    """Print each method's indexing LLM requests and input tokens for the corpus; nothing is sent or kept."""
    with (
        tempfile.TemporaryDirectory(prefix="engram-dry-run-") as scratch,  # no LLM, no cache: all counted
        Memory(Path(scratch) / "memory", embedder=args.embedder, llm=False) as memory,
    ):
        start = time.perf_counter()
        rows = [estimate_row(memory, m, data, args.extractions) for m in methods]
        seconds = time.perf_counter() - start
    print(f"dry run: {len(data.documents)} documents; nothing was sent and nothing was written\n")
    print("| method | passages | LLM requests | input tokens |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['method']} | {row['passages']} | {row['calls']} | {row['input_tokens']:,} |")
    say(f"estimated in {seconds:.1f} s (token counts: engram.tokens; see docs/reproduction.md)")
    return 0


def estimate_row(memory: Memory, method: str, data: Dataset, extractions: str | None) -> dict[str, Any]:
    if method in PEERS:
        return memory.estimate_method(method, data.documents).as_dict()
    if method.removeprefix("rse-") in NO_LLM:
        return {"method": method, "passages": 0, "calls": 0, "input_tokens": 0}
    found = memory.estimate(data.documents, extractions=extractions)
    return {"method": method, **found.as_dict()}
