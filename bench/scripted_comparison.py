"""The paper's comparison command end to end on the shared MuSiQue data against the scripted OpenAI-compatible
server (tests/fake_openai.py on 127.0.0.1), instead of a real LLM: indexing (OpenIE and the peer methods),
retrieval, QA and the cost table run for real; the replies are made from the prompts' text (capitalised words
as entities, chained into relations), so the NUMBERS MEAN NOTHING about quality. What it shows: the pipeline a
user with an OpenAI key or a local vLLM runs (docs/reproduction.md) works on this corpus, and what it costs in
requests and tokens with engram's prompts.

    .venv/bin/python bench/scripted_comparison.py [--limit 20] [--methods hipporag2,lightrag,dense] [--embedder hash]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from engram.cli import main as engram
from engram.retrieve.peers.lightrag_prompts import EXTRACT_SYSTEM, GLEAN_REQUEST, KEYWORDS_SYSTEM
from fake_openai import FakeOpenAI, last_user_text, openie_answer, task_of  # type: ignore[import-not-found]

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def capitalised(text: str, limit: int = 12) -> list[str]:
    words = [w.strip(".,;:!?\"'()") for w in text.split()]
    return list(dict.fromkeys(w for w in words if w[:1].isupper()))[:limit]


def lightrag_answer(request: dict[str, Any]) -> str | None:
    system, user = request["messages"][0]["content"], last_user_text(request)
    if system == EXTRACT_SYSTEM and user == GLEAN_REQUEST:
        return json.dumps({"entities": [], "relations": []})
    if system == EXTRACT_SYSTEM:
        names = capitalised(user.split("Passage:\n", 1)[-1])
        entities = [{"name": n, "type": "other", "description": f"{n} is named in the passage."} for n in names]
        relations = [
            {"source": a, "target": b, "keywords": ["mentioned together"], "description": f"{a} and {b}", "strength": 5}
            for a, b in itertools.pairwise(names)
        ]
        return json.dumps({"entities": entities, "relations": relations})
    if system == KEYWORDS_SYSTEM:
        question = user.removeprefix("Question: ")
        themes = [w for w in question.lower().split() if len(w) > 6][:3]
        return json.dumps({"high_level_keywords": themes, "low_level_keywords": capitalised(question)})
    return None


def handler(request: dict[str, Any]) -> str | None:
    task = task_of(request)
    if task == "reader":
        return "The passages name it.\nAnswer: unknown"
    if task == "filter":
        return json.dumps({"facts": [1]})
    return openie_answer(request) or lightrag_answer(request)


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--methods", default="hipporag2,lightrag,dense")
    parser.add_argument("--embedder", help="embedder spec (default: engram's default, all-MiniLM-L6-v2)")
    args = parser.parse_args(argv)
    if not (args.data / "corpus.jsonl").exists():
        print(f"no shared data at {args.data}", file=sys.stderr)
        return 2
    fake = FakeOpenAI().start()
    fake.handler = handler
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
