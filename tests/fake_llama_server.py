"""Stands in for llama.cpp's `llama-server` in tests: takes its flags, serves the scripted OpenAI-compatible
API (fake_openai, extraction prompts answered by content) on --port, and answers /health.

FAKE_LLAMA_RECORD names a file that gets {"argv": [...], "pid": N} at start; FAKE_LLAMA_CRASH=CODE makes it
print a llama.cpp-like error and exit with CODE before listening."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_openai import FakeOpenAI, Spec, last_user_text, openie_answer, task_of


def answer(request: dict[str, Any]) -> Spec | str | None:
    """Extraction prompts by content (`openie_answer`); the filter keeps every candidate; the reader answers
    with the first capitalised word of the question; anything else gets an empty entity list."""
    extraction = openie_answer(request)
    if extraction is not None:
        return extraction
    task, text = task_of(request), last_user_text(request)
    if task == "filter":
        listed = text.split("Candidate facts:\n", 1)[-1].splitlines()
        return json.dumps({"facts": [json.loads(line.split(". ", 1)[1]) for line in listed if ". [" in line]})
    if task == "reader":
        words = [w for w in text.split() if w[:1].isupper()]
        return f"Answer: {words[-1] if words else 'unknown'}"
    return json.dumps({"entities": []})


def main() -> int:
    p = argparse.ArgumentParser()
    for flag in ("-m", "--alias", "--host", "-t", "-c", "-np", "--frequency-penalty"):
        p.add_argument(flag)
    p.add_argument("--port", type=int, required=True)
    args, _ = p.parse_known_args()
    record = os.environ.get("FAKE_LLAMA_RECORD")
    if record:
        Path(record).write_text(json.dumps({"argv": sys.argv[1:], "pid": os.getpid()}))
    crash = os.environ.get("FAKE_LLAMA_CRASH")
    if crash:
        print(f"gguf_init_from_file: failed to load model '{args.m}': file is damaged", flush=True)
        return int(crash)
    fake = FakeOpenAI(models=(args.alias,), port=args.port)
    fake.handler = answer
    fake.start()
    print(f"main: server is listening on http://{args.host}:{args.port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
