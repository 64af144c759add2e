"""`engram add-method` (index a memory for a peer method such as lightrag) and `engram method-costs` (what a
peer method spent on a memory)."""

from __future__ import annotations

import argparse
import json

from engram.cli.common import Bars, add_common, command, open_memory, say
from engram.retrieve.method_names import PEER_METHODS


def cmd_add_method(args: argparse.Namespace) -> int:
    bars = Bars(args.progress)
    with open_memory(args) as memory:
        try:
            done = memory.add_method(args.method, progress=bars, rebuild=args.rebuild)
        finally:
            bars.close()
        say(f"{args.method}: {done.extracted} chunks extracted, {done.failed} failed, {done.removed} removed")
        print(json.dumps({"method": args.method, "index": done.stats, "costs": memory.method_costs(args.method)}))
    return 0 if not done.failed else 1


def cmd_method_costs(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        print(json.dumps(memory.method_costs(args.method)))
    return 0


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add = command(
        sub,
        "add-method",
        "index a memory for a peer retrieval method (" + ", ".join(PEER_METHODS) + ")",
        "Builds the method's own tables beside the memory's (its LLM calls go through the memory's response\n"
        "cache); from then on index, update, delete and extract keep them in step. Re-running resumes.",
        "engram add-method lightrag --memory my.engram\n"
        "engram retrieve 'Who founded Acme?' --memory my.engram --method lightrag",
    )
    add.add_argument("method", choices=sorted(PEER_METHODS))
    add.add_argument(
        "--rebuild", action="store_true", help="build again from scratch (raptor: cluster every passage again)"
    )
    add_common(add)
    add.set_defaults(func=cmd_add_method)
    costs = command(
        sub,
        "method-costs",
        "what a peer method spent on a memory",
        "LLM calls, tokens, cache hits and seconds at indexing and per query, the disk its tables take, its size.",
        "engram method-costs lightrag --memory my.engram",
    )
    costs.add_argument("method", choices=sorted(PEER_METHODS))
    add_common(costs, llm=False, progress=False)
    costs.set_defaults(func=cmd_method_costs)
