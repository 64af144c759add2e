"""The `engram` command line: a thin layer over the library. It owns output, progress bars and exit codes.
One module per command group; each registers its commands with `configure(sub)`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from engram.cli.common import say
from engram.errors import EngramError


def build_parser() -> argparse.ArgumentParser:
    from engram.cli import demo, evaluate, ingest, local, peers, query
    from engram.server import commands as server

    parser = argparse.ArgumentParser(prog="engram", description="Long-term memory for LLMs (HippoRAG 2).")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (ingest, query, evaluate, demo, peers, local, server):
        group.configure(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from engram.cli.local import local_llm

    args = build_parser().parse_args(argv)
    try:
        with local_llm(args):
            code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
        return code
    except EngramError as exc:
        say(f"engram: error: {exc}")
        return 1
    except KeyboardInterrupt:
        say("engram: interrupted; finished work is saved, run the command again to resume")
        return 130
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader of stdout went away (`engram stats | head -1`): stop quietly, like other Unix tools. Later
    writes to stdout (the interpreter's flush at exit) go to /dev/null instead of raising again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe
