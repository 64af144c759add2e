"""The `engram` command line: a thin layer over the library. It owns output, progress bars and exit codes.
One module per command group; each registers its commands with `configure(sub)`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from engram.cli.common import say
from engram.errors import EngramError


def build_parser() -> argparse.ArgumentParser:
    from engram.cli import demo, evaluate, ingest, query
    from engram.server import commands as server

    parser = argparse.ArgumentParser(prog="engram", description="Long-term memory for LLMs (HippoRAG 2).")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (ingest, query, evaluate, demo, server):
        group.configure(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except EngramError as exc:
        say(f"engram: error: {exc}")
        return 1
    except KeyboardInterrupt:
        say("engram: interrupted; finished work is saved, run the command again to resume")
        return 130


