"""`raptor` at the scale of the shared MuSiQue corpus against the scripted OpenAI-compatible server
(tests/fake_openai.py on 127.0.0.1): the leaves' sizes, what building and keeping the tree cost in time and LLM
requests, and the estimate beside the build's real request count; not quality.

The passages are indexed first without an LLM (imported empty extractions), then: `add_method("raptor")` (the
build: clustering, one scripted summary per cluster), one write of a new document (placed into the stored
tree), the delete of that document, a rebuild from scratch (`add_method("raptor", rebuild=True)`: every passage
clustered again; the summaries of clusters that came out the same are reused), and 20 collapsed-tree queries.
Summaries are short texts made from the request, so the upper layers cluster scripted text. Numbers are wall
seconds on this machine and the summary requests the server received.

    .venv/bin/python bench/bench_raptor.py [--passages 1890] [--embedder hash|minilm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890" / "corpus.jsonl"


def handle(request: dict[str, Any]) -> Any:
    from engram.retrieve.peers.raptor.prompts import SUMMARY_SYSTEM
    from fake_openai import last_user_text, openie_answer, reply

    if request["messages"][0]["content"] != SUMMARY_SYSTEM:
        opened = openie_answer(request)  # a write's passage may be extracted by the memory's OpenIE
        return None if opened is None else reply(opened)
    user = last_user_text(request)
    words = [w for w in user.split() if w[:1].isupper() and w != "Text"]
    summary = f"{user.count('Text ')} texts about " + " ".join(list(dict.fromkeys(words))[:12])
    return reply(json.dumps({"summary": summary}))


def summaries(fake: Any) -> int:
    from engram.retrieve.peers.raptor.prompts import SUMMARY_SYSTEM

    return sum(1 for r in fake.requests if r["messages"][0]["content"] == SUMMARY_SYSTEM)


def cache_hits(memory: Any) -> int:
    return int(memory.method_costs("raptor")["phases"]["index"]["cache_hits"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1890)
    parser.add_argument("--embedder", default="hash", help="embedder spec (engram.embed.make_embedder)")
    args = parser.parse_args()
    from engram import Document, Memory
    from engram.embed import make_embedder
    from engram.retrieve.peers.lightrag.prompts import passage_block
    from engram.tokens import estimate_tokens
    from fake_openai import FakeOpenAI

    rows = [json.loads(line) for line in CORPUS.open(encoding="utf-8")][: args.passages]
    docs = [Document(str(r["id"]), r["text"], title=r.get("title")) for r in rows]
    sizes = [estimate_tokens(passage_block(d.title, d.text)) for d in docs]
    print(f"leaves: {len(docs)} passages, tokens mean {statistics.mean(sizes):.0f}, median "
          f"{statistics.median(sizes):.0f}, max {max(sizes)} (engram's offline estimate)")  # fmt: skip
    none = [{"id": d.id, "entities": [], "triples": []} for d in docs]
    embedder = make_embedder(args.embedder)
    fake = FakeOpenAI().start()
    fake.handler = handle
    root = Path(tempfile.mkdtemp(prefix="bench-raptor-")) / "memory"
    try:
        with Memory(root, embedder=embedder, llm=False) as memory:
            memory.index(docs, extractions=none)
        with Memory(root, embedder=embedder, llm=fake.chat()) as memory:
            estimate = memory.estimate_method("raptor")
            print(f"estimate: {estimate.calls} requests, {estimate.input_tokens} input tokens")
            start = time.perf_counter()
            built = memory.add_method("raptor")
            prompt = memory.method_costs("raptor")["phases"]["index"]["prompt_tokens"]
            print(f"build: {time.perf_counter() - start:.1f} s, {summaries(fake)} summary requests "
                  f"({prompt} prompt tokens as the server counts words), index {built.stats}")  # fmt: skip
            new = Document("bench-new", "Zorro Vega met Alice Bell in Paris.")
            for label, step in (
                ("one write", lambda: memory.index([new], extractions=[{"id": new.id, "entities": [], "triples": []}])),
                ("its delete", lambda: memory.delete([new.id])),
                ("rebuild from scratch", lambda: memory.add_method("raptor", rebuild=True)),
            ):
                calls, hits, start = summaries(fake), cache_hits(memory), time.perf_counter()
                step()
                sent, cached = summaries(fake) - calls, cache_hits(memory) - hits
                print(f"{label}: {time.perf_counter() - start:.1f} s, {sent} summary requests sent, "
                      f"{cached} answered by the response cache")  # fmt: skip
            start = time.perf_counter()
            memory.retrieve(["Who founded the American Institute of Physics?"] * 20, top_k=5, method="raptor")
            print(f"20 collapsed-tree queries: {time.perf_counter() - start:.2f} s")
    finally:
        fake.close()


if __name__ == "__main__":
    main()
