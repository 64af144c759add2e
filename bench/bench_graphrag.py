"""`graphrag-local` at the scale of the shared MuSiQue corpus against the scripted OpenAI-compatible server
(tests/fake_openai.py on 127.0.0.1): what its build and its upkeep cost in time and LLM requests, not quality.

The scripted extraction names up to eight capitalised phrases of each passage as entities, chained by
relationships; summaries and reports are short fixed replies. The passages are indexed first without an LLM
(hash embedder, imported empty extractions), then: `add_method("graphrag-local")` (the build), one write of a
new document, the delete of that document, and 20 local searches. Numbers are wall seconds on this machine and
the requests the server received (and those the response cache answered); they say what the method's own steps
cost, since every reply is instant.

    .venv/bin/python bench/bench_graphrag.py [--passages 1890]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(Path(__file__).resolve().parent))
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890" / "corpus.jsonl"


def handle(request: dict[str, Any]) -> Any:
    from fake_openai import reply
    from scripted_replies import answer

    found = answer(request)
    return None if found is None else reply(found)


def cache_hits(memory: Any) -> int:
    return int(memory.method_costs("graphrag-local")["phases"]["index"]["cache_hits"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1890)
    args = parser.parse_args()
    from engram import Document, Memory
    from engram.embed import HashEmbedder
    from fake_openai import FakeOpenAI

    rows = [json.loads(line) for line in CORPUS.open(encoding="utf-8")][: args.passages]
    docs = [Document(str(r["id"]), r["text"], title=r.get("title")) for r in rows]
    none = [{"id": d.id, "entities": [], "triples": []} for d in docs]
    fake = FakeOpenAI().start()
    fake.handler = handle
    root = Path(tempfile.mkdtemp(prefix="bench-graphrag-")) / "memory"
    try:
        with Memory(root, embedder=HashEmbedder(), llm=False) as memory:
            memory.index(docs, extractions=none)
        with Memory(root, embedder=HashEmbedder(), llm=fake.chat()) as memory:
            start = time.perf_counter()
            built = memory.add_method("graphrag-local")
            print(f"build: {time.perf_counter() - start:.1f} s, {fake.attempts} requests, index {built.stats}")
            new = Document("bench-new", "Zorro Vega met Alice Bell in Paris.")
            for label, step in (
                ("one write", lambda: memory.index([new], extractions=[{"id": new.id, "entities": [], "triples": []}])),
                ("its delete", lambda: memory.delete([new.id])),
            ):
                calls, hits, start = fake.attempts, cache_hits(memory), time.perf_counter()
                step()
                seconds, hits = time.perf_counter() - start, cache_hits(memory) - hits
                print(f"{label}: {seconds:.1f} s, {fake.attempts - calls} requests sent, {hits} answered by the cache")
            start = time.perf_counter()
            memory.retrieve(["Who founded the American Institute of Physics?"] * 20, top_k=5, method="graphrag-local")
            print(f"20 local searches: {time.perf_counter() - start:.2f} s")
    finally:
        fake.close()


if __name__ == "__main__":
    main()
