"""`engram index`, `engram extract`, `engram delete` and `engram sync`."""

from __future__ import annotations

import argparse

from engram.cli.common import Bars, add_common, open_memory, report_index, say
from engram.cli.llm_args import add_run_args, memory_for_estimate, print_estimate, report_llm


def cmd_index(args: argparse.Namespace) -> int:
    from engram.ingest.sources import collect

    collected = collect(args.paths)
    for path, reason in collected.skipped.items():
        say(f"skipped {path}: {reason}")
    if args.dry_run:
        with memory_for_estimate(args) as memory:
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


def cmd_delete(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        report = memory.delete(args.ids)
    for doc_id, reason in report.skipped.items():
        say(f"skipped {doc_id}: {reason}")
    say(f"deleted {report.documents} documents")
    report.skipped = {}
    report_index(report)
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    bars = Bars(args.progress)
    with open_memory(args, create=True) as memory:
        try:
            report = memory.sync(args.folder, progress=bars)
        finally:
            bars.close()
        stats = memory.stats()
    for path, reason in report.skipped.items():
        say(f"skipped {path}: {reason}")
    for label, ids in (("added", report.added), ("updated", report.updated), ("deleted", report.deleted)):
        for doc_id in ids:
            print(f"{label:<8} {doc_id}")
    say(f"sync: {len(report.added)} added, {len(report.updated)} updated, {len(report.deleted)} deleted, "
        f"{report.unchanged} unchanged; memory: {stats['passages']} passages, {stats['facts']} facts")
    return 0


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    index = sub.add_parser("index", help="add documents (files, folders, .jsonl/.json corpora)")
    add_common(index)
    index.add_argument("paths", nargs="+", help="files or folders")
    index.add_argument("--extractions", help="precomputed extractions (JSONL or HippoRAG OpenIE JSON)")
    add_run_args(index, chunking=True)
    index.set_defaults(func=cmd_index)
    extract = sub.add_parser("extract", help="run the LLM on pending and failed passages")
    add_common(extract)
    add_run_args(extract, chunking=False)
    extract.set_defaults(func=cmd_extract)
    delete = sub.add_parser("delete", help="remove documents by id")
    add_common(delete)
    delete.add_argument("ids", nargs="+", help="document ids")
    delete.set_defaults(func=cmd_delete)
    sync = sub.add_parser("sync", help="make the memory mirror a folder (add, update, delete)")
    add_common(sync)
    sync.add_argument("folder", help="folder of .txt/.md files")
    sync.set_defaults(func=cmd_sync)
