"""The paper's comparison command end to end on the shared MuSiQue data against the scripted OpenAI-compatible
server (tests/fake_openai.py on 127.0.0.1), instead of a real LLM: indexing (OpenIE and the peer methods),
retrieval, QA and the cost table run for real; the replies are made from the prompts' text (capitalised words
as entities, chained into relations), so the NUMBERS MEAN NOTHING about quality. What it shows: the pipeline a
user with an OpenAI key or a local vLLM runs (docs/reproduction.md) works on this corpus, and what it costs in
requests and tokens with engram's prompts.

    .venv/bin/python bench/scripted_comparison.py [--limit 20] [--embedder hash]
        [--methods hipporag2,raptor,graphrag-local,lightrag,dense]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engram.cli import main as engram
from fake_openai import FakeOpenAI  # type: ignore[import-not-found]
from scripted_replies import answer

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--methods", default="hipporag2,raptor,graphrag-local,lightrag,dense")
    parser.add_argument("--embedder", help="embedder spec (default: engram's default, all-MiniLM-L6-v2)")
    args = parser.parse_args(argv)
    if not (args.data / "corpus.jsonl").exists():
        print(f"no shared data at {args.data}", file=sys.stderr)
        return 2
    fake = FakeOpenAI().start()
    fake.handler = answer
    try:
        data = ["--corpus", str(args.data / "corpus.jsonl"), "--questions", str(args.data / "questions.jsonl")]
        llm = ["--llm-base-url", fake.base_url, "--llm-model", "fake-model", "--llm-concurrency", "16"]
        command = ["eval", *data, "--methods", args.methods, "--qa", "--limit", str(args.limit), *llm,
                   "--bootstrap-samples", "200"]  # fmt: skip
        if args.embedder:
            command += ["--embedder", args.embedder]
        code = engram(command)
    finally:
        fake.close()
    print(f"\nscripted server: {fake.attempts} chat requests", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(run())
