"""What every command shares: the memory to open, progress bars, messages and how results are printed."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

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
