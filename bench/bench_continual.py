"""Continual-learning speed on synthetic corpora (issue 4): inserting one passage with a cached extraction and
deleting one document, on memories of 5k, 10k and 20k passages.

Each corpus is generated here, deterministically: about 9 triples per passage over a phrase vocabulary that
grows with the corpus (~8 phrases per passage, like MuSiQue's 16k phrases for 1.9k passages; some phrases are
variants of others, so synonym edges exist), short texts made of the triples, and the extractions to import.
Vectors come from `HashEmbedder(dim=384)` (MiniLM's shape, no model needed). Each size is built once (timed),
then a new passage is inserted with its extraction and an original document deleted, `--repeat` times each.
Insert times exclude embedding the new passage's own texts (passage, new phrases and facts: `timings["embed"]`),
which is reported apart.

Targets: insert and delete under 0.5 s at 20k, growing sub-linearly with the memory's size.

    .venv/bin/python bench/bench_continual.py [--sizes 5000,10000,20000] [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engram import Document, Memory
from engram.embed import HashEmbedder

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "or", "en")]
RELATIONS = [
    "is located in", "was born in", "founded", "is part of", "married", "directed", "was released in",
    "is the capital of", "plays for", "was written by", "is a member of", "borders", "succeeded", "won",
]  # fmt: skip
TRIPLES_PER_PASSAGE = (8, 10)
NEW_PHRASE_SHARE = 0.45  # of the phrase mentions: ~18 mentions per passage -> ~8 new phrases per passage
STEPS = ("prepare", "import", "embed", "tables", "synonyms", "graph", "commit")
VARIANT_SHARE = 0.1  # of the new phrases: a variant of an existing one (a synonym candidate)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Generator:
    """Deterministic synthetic passages and extractions; the phrase vocabulary grows as passages are made."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.phrases: list[str] = []
        self.made = 0

    def _word(self) -> str:
        n = int(self.rng.integers(2, 4))
        return "".join(SYLLABLES[int(i)] for i in self.rng.integers(0, len(SYLLABLES), n))

    def _new_phrase(self) -> str:
        if self.phrases and self.rng.random() < VARIANT_SHARE:
            base = self.phrases[int(self.rng.integers(0, len(self.phrases)))]
            phrase = base + (" " + self._word() if self.rng.random() < 0.5 else "s")
        else:
            phrase = " ".join(self._word() for _ in range(int(self.rng.integers(1, 4)))).title()
        self.phrases.append(phrase)
        return phrase

    def _phrase(self) -> str:
        if not self.phrases or self.rng.random() < NEW_PHRASE_SHARE:
            return self._new_phrase()
        # reuse, skewed towards popular (early) phrases, like entities that recur across articles
        n = len(self.phrases)
        return self.phrases[min(n - 1, int(n * self.rng.random() ** 2))]

    def passage(self) -> tuple[Document, dict[str, Any]]:
        i = self.made
        self.made += 1
        triples = []
        for _ in range(int(self.rng.integers(TRIPLES_PER_PASSAGE[0], TRIPLES_PER_PASSAGE[1] + 1))):
            subject, obj = self._phrase(), self._phrase()
            triples.append([subject, RELATIONS[int(self.rng.integers(0, len(RELATIONS)))], obj])
        title = triples[0][0]
        text = " ".join(f"{s} {r} {o}." for s, r, o in triples)
        doc_id = f"doc{i:06d}"
        entities = sorted({t[0] for t in triples} | {t[2] for t in triples})
        return Document(doc_id, text, title=title), {"id": doc_id, "entities": entities, "triples": triples}

    def corpus(self, n: int) -> tuple[list[Document], list[dict[str, Any]]]:
        docs, extractions = [], []
        for _ in range(n):
            doc, extraction = self.passage()
            docs.append(doc)
            extractions.append(extraction)
        return docs, extractions


@dataclass
class SizeResult:
    size: int
    build_seconds: float
    stats: dict[str, int]
    insert: list[float] = field(default_factory=list)  # seconds excluding the embedding of the new texts
    insert_embed: list[float] = field(default_factory=list)
    insert_steps: list[dict[str, float]] = field(default_factory=list)
    delete: list[float] = field(default_factory=list)
    delete_steps: list[dict[str, float]] = field(default_factory=list)
    # the first hipporag2 query after an insert + delete: it derives the graph arrays the commits deferred
    first_query: list[float] = field(default_factory=list)


def build(size: int, root: Path) -> tuple[Memory, Generator, list[str], SizeResult]:
    generator = Generator(seed=size)
    docs, extractions = generator.corpus(size)
    say(f"[{size}] generated {len(docs)} passages, {len(generator.phrases)} new phrases drawn")
    memory = Memory(root / f"m{size}", embedder=HashEmbedder(dim=384))
    start = time.perf_counter()
    report = memory.index(docs, extractions=extractions)
    result = SizeResult(size, time.perf_counter() - start, dict(report.stats))
    steps = ", ".join(f"{k} {v:.1f}" for k, v in report.timings.items())
    say(f"[{size}] built in {result.build_seconds:.1f} s ({steps}): {report.stats}")
    return memory, generator, [d.id for d in docs], result


def insert_and_delete(memory: Memory, generator: Generator, victim: str, result: SizeResult) -> None:
    """Insert a new passage with its extraction, then delete an original document; record both."""
    doc, extraction = generator.passage()
    start = time.perf_counter()
    report = memory.index([doc], extractions=[extraction])
    total = time.perf_counter() - start
    embed = report.timings.get("embed", 0.0)
    result.insert.append(total - embed)
    result.insert_embed.append(embed)
    result.insert_steps.append(dict(report.timings))
    start = time.perf_counter()
    report = memory.delete([victim])
    result.delete.append(time.perf_counter() - start)
    result.delete_steps.append(dict(report.timings))
    start = time.perf_counter()
    memory.retrieve("which mill was founded near the river", top_k=5)
    result.first_query.append(time.perf_counter() - start)


def measure(size: int, repeat: int, root: Path, profile: Path | None) -> SizeResult:
    memory, generator, ids, result = build(size, root)
    victims = [ids[int(i)] for i in np.random.default_rng(size).choice(size, repeat + 3, replace=False)]
    for victim in victims[:repeat]:
        insert_and_delete(memory, generator, victim, result)
    say(f"[{size}] insert {statistics.median(result.insert):.3f} s, delete {statistics.median(result.delete):.3f} s")
    if profile:  # extra, untimed rounds under the profiler (it slows Python code down)
        profiler = cProfile.Profile()
        profiler.enable()
        for victim in victims[repeat:]:
            insert_and_delete(memory, generator, victim, SizeResult(size, 0.0, {}))
        profiler.disable()
        profiler.dump_stats(str(profile.with_suffix(f".{size}.prof")))
        say(f"[{size}] profile of 3 inserts + 3 deletes (by own time):")
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(20)
    memory.close()
    return result


def median_steps(rows: list[dict[str, float]]) -> str:
    keys = [k for k in STEPS if any(k in r for r in rows)]
    return " ".join(f"{k} {statistics.median(r.get(k, 0.0) for r in rows) * 1000:.0f}" for k in keys)


def print_table(results: list[SizeResult]) -> None:
    print("| passages | phrases | facts | edges | build s | insert s | (embed s) | delete s | first query s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r.stats
        print(
            f"| {r.size:,} | {s['phrases']:,} | {s['facts']:,} | {s['edges']:,} | {r.build_seconds:.1f} "
            f"| {statistics.median(r.insert):.3f} | {statistics.median(r.insert_embed):.3f} "
            f"| {statistics.median(r.delete):.3f} | {statistics.median(r.first_query):.3f} |"
        )
    print("\nmedian ms per step (insert, then delete):")
    for r in results:
        print(f"  {r.size:>6,}: insert [{median_steps(r.insert_steps)}]  delete [{median_steps(r.delete_steps)}]")
    first, last = results[0], results[-1]
    for name, a, b in (
        ("insert", statistics.median(first.insert), statistics.median(last.insert)),
        ("delete", statistics.median(first.delete), statistics.median(last.delete)),
    ):
        growth = math.log(b / a) / math.log(last.size / first.size) if last.size > first.size else float("nan")
        shape = "sub-linear" if growth < 0.9 else "linear or worse"
        print(
            f"{name}: {b:.3f} s at {last.size:,} ({'under' if b < 0.5 else 'OVER'} 0.5 s); "
            f"x{b / a:.2f} from {first.size:,} to {last.size:,} passages (time ~ size^{growth:.2f}: {shape})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="5000,10000,20000", help="comma-separated corpus sizes")
    parser.add_argument("--repeat", type=int, default=5, help="inserts and deletes timed per size")
    parser.add_argument("--profile", type=Path, help="cProfile the inserts/deletes into PROFILE.<size>.prof")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="engram-bench-continual-") as tmp:
        for size in sizes:
            results.append(measure(size, args.repeat, Path(tmp), args.profile))
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
