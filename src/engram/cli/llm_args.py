"""The LLM side of `engram index` and `engram extract`: --dry-run, --max-tokens, --max-input-tokens, and what
a run reports about its calls."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram.cli.common import open_memory, say
from engram.store.manifest import MANIFEST
from engram.store.pg_schema import is_database_url
from engram.types import IndexReport

if TYPE_CHECKING:
    from engram.extract.planning import ExtractionEstimate
    from engram.memory import Memory


def add_run_args(p: argparse.ArgumentParser, *, chunking: bool) -> None:
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate the LLM requests and input tokens, then stop: no LLM call, nothing written",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="stop starting passages once this run has spent N LLM tokens; run again to resume",
    )
    if chunking:
        p.add_argument(
            "--max-input-tokens",
            type=int,
            metavar="N",
            help="chunk documents so every extraction prompt fits N tokens (the model's context minus the reply)",
        )


@contextmanager
def memory_for_estimate(args: argparse.Namespace) -> Iterator[Memory]:
    """The memory to estimate against; a memory that does not exist yet is not created (an empty stand-in
    in a temporary folder is used instead)."""
    path = Path(args.memory)
    if is_database_url(args.memory) or (path / MANIFEST).exists():
        with open_memory(args) as memory:
            yield memory
        return
    with tempfile.TemporaryDirectory(prefix="engram-dry-run-") as scratch:
        stand_in = argparse.Namespace(**{**vars(args), "memory": str(Path(scratch) / "memory")})
        with open_memory(stand_in, create=True) as memory:
            yield memory


def print_estimate(estimate: ExtractionEstimate, llm: Any) -> None:
    model = getattr(llm, "identity", None) or "no LLM configured"
    print(
        f"dry run ({model}): {estimate.passages} passages to extract, {estimate.calls} LLM requests, "
        f"about {estimate.input_tokens} input tokens; {estimate.cached_calls} requests answered from the cache"
    )
    print("nothing was sent and nothing was written (token counts: see `engram.tokens`)")


def report_llm(report: IndexReport) -> None:
    usage = report.llm
    if usage.get("calls") or usage.get("cache_hits") or usage.get("failures"):
        say(
            f"LLM: {usage.get('calls', 0)} calls, {usage.get('prompt_tokens', 0)} prompt + "
            f"{usage.get('completion_tokens', 0)} completion tokens, {usage.get('cache_hits', 0)} cache hits, "
            f"{usage.get('retries', 0)} retries, {usage.get('failures', 0)} failed calls"
        )
    if report.budget_reached:
        say(
            f"stopped at the token budget ({usage.get('tokens', 0)} tokens spent): {report.pending} passages "
            "are still pending; finished work is saved, run the command again to resume"
        )
