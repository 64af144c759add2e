"""The flags of `engram eval` (shared by the single-run and the continual-learning modes) and their checks."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram.cli.common import add_common
from engram.errors import InputError, LLMError
from engram.eval.loaders import FORMATS
from engram.retrieve.method_names import METHODS, NEEDS_ENTITIES

if TYPE_CHECKING:
    from engram.eval.loaders import Dataset
    from engram.memory import Memory


def add_eval_args(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--baseline", help="row the paired bootstrap compares against (default dense, when run)")
    p.add_argument("--bootstrap-samples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--out", help="write results.json, report.md, details.jsonl and PNG plots into this folder")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate each method's indexing LLM requests and input tokens for the corpus, then stop",
    )
    add_continual_args(p)


def add_continual_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--continual",
        type=int,
        metavar="N",
        help="continual learning (HippoRAG 2 paper, fig. 3): split the corpus and its questions into N segments, "
        "index them one by one into the same memory and measure recall on one segment's questions after each",
    )
    p.add_argument(
        "--eval-segment", type=int, default=1, help="with --continual: the segment evaluated (indexed first; default 1)"
    )


def parse_methods(args: argparse.Namespace) -> list[str]:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    if not methods:
        raise InputError(f"--methods names no method; choose from {', '.join(METHODS)}")
    return methods


def parse_weights(values: list[str]) -> list[float]:
    try:
        weights = [float(v) for value in values for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise InputError(f"--passage-weight takes numbers: {exc}") from exc
    wrong = [w for w in weights if not 0.0 <= w < float("inf")]
    if wrong:
        raise InputError(f"--passage-weight takes weights of at least 0, not {wrong[0]:g}")
    return weights


def baseline(args: argparse.Namespace, rows: list[str]) -> str:
    """The row the paired bootstrap compares against: --baseline, which must be one of the run's `rows`, else
    dense (no comparison when dense is not run)."""
    if args.baseline is not None and args.baseline not in rows:
        raise InputError(f"--baseline {args.baseline} is not among the rows this run makes: {', '.join(rows)}")
    return str(args.baseline or "dense")


def check_args(args: argparse.Namespace, methods: list[str], has_llm: bool) -> None:
    if args.top_k < 1:
        raise InputError("--top-k must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise InputError("--limit must be at least 1 (leave it out for every question)")
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file: name a folder (results.json, report.md, ... go into it)")
    needs = [m for m in methods if m in NEEDS_ENTITIES]
    if needs and not has_llm and not args.query_entities:
        raise InputError(f"{', '.join(needs)} need query entities: pass --query-entities FILE or configure an LLM")
    if (args.ircot_steps or args.qa) and not has_llm:
        raise LLMError("--ircot-steps and --qa need an LLM: set ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL")
    if args.ircot_steps < 0:
        raise InputError("--ircot-steps must be positive")


def run_setup(args: argparse.Namespace, data: Dataset, memory: Memory, methods: list[str]) -> dict[str, Any]:
    return {
        "questions": args.questions,
        "corpus": args.corpus,
        "format": data.format,
        "extractions": args.extractions,
        "methods": methods,
        "depth": args.top_k,
        "embedder": memory.embedder.identity,
        "llm": memory.llm.identity if memory.llm is not None else None,
        "passage_weights": parse_weights(args.passage_weight) or None,
        "ircot_steps": args.ircot_steps or None,
    }
