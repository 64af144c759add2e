"""What the benchmarks that time one kept memory share: its arguments (`--memory`, `--data`, `--queries`,
`--rounds`) and the queries with the embedder to open it with (a `bench_scale.py --keep` memory, given with its
`queries.json`, is opened with its own hash embedder; a memory indexed from the MuSiQue data with the default)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engram.embed import HashEmbedder
from engram.eval.data import load_questions

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--queries", type=Path, help="a JSON list of queries instead of --data's questions")
    parser.add_argument("--rounds", type=int, default=5)


def queries_and_embedder(args: argparse.Namespace) -> tuple[list[str], HashEmbedder | None]:
    """The queries to time, and the embedder to open the memory with (None: the memory's default)."""
    if args.queries is not None:
        return [str(q) for q in json.loads(args.queries.read_text(encoding="utf-8"))], HashEmbedder(dim=384)
    return [q.question for q in load_questions(args.data / "questions.jsonl")], None
