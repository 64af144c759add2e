"""`engram delete` and `engram sync`."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from engram.cli import Bars, open_memory, report_index, say


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
    from engram.sync import sync_folder

    bars = Bars(args.progress)
    with open_memory(args, create=True) as memory:
        try:
            report = sync_folder(memory, args.folder, progress=bars)
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


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser], add_common: Callable[..., None]) -> None:
    delete = sub.add_parser("delete", help="remove documents by id")
    add_common(delete)
    delete.add_argument("ids", nargs="+", help="document ids")
    delete.set_defaults(func=cmd_delete)
    sync = sub.add_parser("sync", help="make the memory mirror a folder (add, update, delete)")
    add_common(sync)
    sync.add_argument("folder", help="folder of .txt/.md files")
    sync.set_defaults(func=cmd_sync)
