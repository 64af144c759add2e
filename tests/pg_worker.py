"""A separate engram process on a shared PostgreSQL memory, for tests/test_pg_writers.py.

    python tests/pg_worker.py write URL FIRST COUNT GATE   once file GATE exists, index documents
                                                          FIRST..FIRST+COUNT-1, one commit each
    python tests/pg_worker.py read URL FINAL TIMEOUT GATE  retrieve in a loop until generation FINAL; creates
                                                          GATE after its first read

Prints one JSON line: what it did and saw (a reader: reads, generations seen in order, errors, and how many of its
refreshes replayed the commit log or reloaded)."""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engram import Document, GraphConfig, Memory, MemoryConfig
from engram.embed import HashEmbedder

CONFIG = MemoryConfig(graph=GraphConfig(synonym_threshold=0.5, synonym_top_k=2))
NAMES = ["north river", "old mill", "Anna Berg", "Lake Oster", "mill town", "Berg family", "1901", "river bank"]


def document(i: int) -> tuple[Document, dict[str, Any]]:
    """Document i and its extraction: two triples over a small shared vocabulary (so commits share phrases)."""
    a, b, c = NAMES[i % 8], NAMES[(i * 3 + 1) % 8], NAMES[(i * 5 + 2) % 8]
    triples = [[a, "is near", b], [b, f"owned by {i % 3}", c]]
    text = f"{a} is near {b}; {b} is owned by {c}. Note {i}."
    return Document(f"doc{i:03d}", text, title=f"Note {i}"), {"id": f"doc{i:03d}", "triples": triples}


def open_memory(url: str) -> Memory:
    return Memory(url, embedder=HashEmbedder(dim=64), llm=False, config=CONFIG)


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def wait_for(gate: Path, timeout: float = 240.0) -> None:
    """Block until the reader has read once, so its reads overlap the commits however slowly it started."""
    end = time.monotonic() + timeout
    while not gate.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"the reader never created {gate}")
        time.sleep(0.01)


def write(url: str, first: int, count: int, gate: Path) -> dict[str, Any]:
    """Index `count` documents one commit each; reports how often a commit lost the race and was retried."""
    retries = _Count()
    logging.getLogger("engram.index.live.retry").addHandler(retries)
    logging.getLogger("engram.index.live.retry").setLevel(logging.INFO)
    with open_memory(url) as memory:
        wait_for(gate)
        for i in range(first, first + count):
            doc, extraction = document(i)
            memory.index([doc], extractions=[extraction])
        return {"written": count, "retries": retries.count, "generation": memory.stats()["generation"]}


def read(url: str, final: int, timeout: float, gate: Path) -> dict[str, Any]:
    """Retrieve in a loop until the memory reaches generation `final` (or `timeout` seconds pass)."""
    generations: list[int] = []
    passages: list[int] = []
    errors: list[str] = []
    kept = {True: 0, False: 0}  # refreshes that kept the state object (replayed) or not
    with open_memory(url) as memory:
        end = time.monotonic() + timeout
        while time.monotonic() < end and (not generations or generations[-1] < final):
            try:
                loads = memory.index_loads
                ranked = memory.retrieve("Who owns the old mill near north river?", top_k=3)[0]
                assert len(ranked.passages) <= 3
                stats = memory.stats()
                if generations and stats["generation"] != generations[-1]:
                    kept[memory.index_loads == loads] += 1  # the commit log replayed, or a reload
                generations.append(stats["generation"])
                passages.append(stats["passages"])
            except Exception:  # every failure is reported to the test, which fails on any
                errors.append(traceback.format_exc())
            gate.touch()
            time.sleep(0.005)
    seen = {"reads": len(generations), "generations": generations, "passages": passages, "errors": errors}
    return {**seen, "replayed": kept[True], "reloaded": kept[False]}


if __name__ == "__main__":
    mode, target = sys.argv[1], sys.argv[2]
    numbers, gate_file = sys.argv[3:5], Path(sys.argv[5])
    if mode == "write":
        result = write(target, int(numbers[0]), int(numbers[1]), gate_file)
    else:
        result = read(target, int(numbers[0]), float(numbers[1]), gate_file)
    print(json.dumps(result))
