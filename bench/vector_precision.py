"""What storing the passage, phrase and fact vectors in a narrower type than float32 would change (issue 54: the
narrowest type that keeps the shared MuSiQue recalls within 0.005 of exact).

Builds the shared MuSiQue memory (`results.py`'s: the 1,930 passages of the shared data with the released
GPT-3.5 triples imported, all-MiniLM-L6-v2, no LLM) once per precision in a temporary directory, with an
embedder that hands the real model's vectors back rounded through the storage type, for the stored roles only
(passage, phrase, fact; queries are never stored and stay float32):

- `float32`: unchanged, the baseline (bench/RESULTS.md's default and dense rows);
- `float16`: `v.astype(float16).astype(float32)`, not re-normalised (its lengths stay within engram's 1e-3);
- `int8`: engram's own 8-bit fact codes (engram.index.state.coded_rows) applied to every stored role: component
  j is `scales[j]` x a code in -127..127, `scales[j]` the largest |component j| over the role's rows / 127,
  fitted once over the whole table (the float32 build's rows of that role, every row present, as
  `CodedRows._fit` fits over the rows present when it first encodes), then each decoded row re-normalised to
  length 1, because the decoded rows miss length 1 by up to about 2e-3 and engram refuses stored vectors
  further than 1e-3 from it (engram.index.live.load.check_vectors);
- `int8 not re-normalised`: the decoded rows as they are. Its snapshot reopens (the table's "reopens": the
  memory opened again and scored the same), but `check_vectors` runs when a state is rebuilt from the records
  (no usable snapshot), and it would refuse the rows the last column counts (length off by more than 1e-3);
- `int8 first-batch scales`: as `int8`, the scales fitted instead on the first batch of each role that engram
  embeds (256 texts in hash order: what a memory that grows could fit before it has seen its table), later
  components beyond them clipped to +-127;
- `facts int8 per row`: what a memory made now stores (`graph.vector_precision = "int8"`,
  engram.store.packed_rows): passages and phrases float16, each fact row coded on its own, rint(127 v / max |v|),
  read back divided by its codes' norm (length 1; no scales fitted to other rows).

The wrapper passes the model's token limit on (`max_tokens`, `count_tokens`), so passages are split as the
plain default embedder splits them (1,930 passages from the 1,890; `CachedEmbedder` alone has no token limit,
so a memory built through it keeps the 1,890 whole).

For each it prints recall@2 and recall@5 of the default method (`hipporag2`, no LLM) and of `dense` on all 50
questions, the first 25 and the last 25 (engram.eval.runner.run_method, as `results.py` scores them), the
largest change of any of those from float32; then the synonym edges (by phrase pair) against the float32
build's: how many, kept, added, dropped, the largest change of a kept edge's weight; and the largest |cosine
difference| between rounded and float32 vectors over 10,000 random fact-query pairs (the 50 questions as
queries, seed 0), over every passage-query pair and over 10,000 random phrase pairs, with the largest
|length - 1| of a stored row.

Vectors come from `vector_cache.CachedEmbedder`: the shared MiniLM cache (~/.cache/engram-bench/minilm) is
only read (another process may be writing it: one writer per folder), and texts it lacks are embedded and
kept in `--cache` (default ~/.cache/engram-bench/minilm-vector-precision).

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python bench/vector_precision.py [--data DIR]

About 2 minutes per precision on the shared 2-core machine once the vectors are cached.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engram import Memory
from engram.errors import MemoryFormatError
from engram.eval.data import Question, load_corpus, load_questions
from engram.eval.runner import MethodSpec, RunOptions, run_method
from engram.store.packed_rows import pack, unpack
from quality_halves import mean
from results import DEFAULT_DATA, RELEASED
from vector_cache import CachedEmbedder, default_folder

Vectors = npt.NDArray[np.float32]
STORED = ("passage", "phrase", "fact")  # the roles whose vectors a memory keeps
WIDE = {"graph": {"vector_precision": "float32"}}  # the memory stores what the wrapper rounded, not float16 again
PER_ROW = "facts int8 per row"  # passages and phrases float16, facts 8-bit with one scale per row
PRECISIONS = ("float32", "float16", "int8", "int8 not re-normalised", "int8 first-batch scales", PER_ROW)
METHODS = ("hipporag2", "dense")
KS = ("2", "5")
LEVELS = 127  # engram's 8-bit codes: -127..127 (engram.index.state.coded_rows.LEVELS)
PAIRS = 10_000
NORM_TOLERANCE = 1e-3  # engram.index.live.load.NORM_TOLERANCE


def fit_scales(rows: Vectors) -> Vectors:
    """Each dimension's scale: its largest magnitude over `rows`, over 127 (1 where that is 0), as
    `CodedRows._fit` fits engram's fact codes."""
    scales = (np.abs(rows).max(axis=0) / np.float32(LEVELS)).astype(np.float32)
    scales[~(np.isfinite(scales) & (scales > 0))] = 1.0
    return scales


def per_row_int8(v: Vectors) -> Vectors:
    """Each row coded on its own as engram stores fact rows (engram.store.packed_rows), read back as engram reads
    them: codes rint(127 x row / its largest |component|) times 1 / ||codes|| (length 1)."""
    return unpack(pack(v))


def round_through(v: Vectors, precision: str, scales: Vectors | None, role: str = "fact") -> Vectors:
    """`v` (rows of `role`) as it would read back from storage in `precision`."""
    if precision == "float32":
        return v
    if precision == PER_ROW:  # what a memory made now stores (graph.vector_precision "int8")
        return per_row_int8(v) if role == "fact" else v.astype(np.float16).astype(np.float32)
    if precision == "float16":
        return v.astype(np.float16).astype(np.float32)
    assert scales is not None
    decoded = (np.clip(np.rint(v / scales), -LEVELS, LEVELS) * scales).astype(np.float32)
    if precision == "int8 not re-normalised":
        return decoded
    norms = np.linalg.norm(decoded, axis=1, keepdims=True)
    out: Vectors = np.divide(decoded, norms, out=np.zeros_like(decoded), where=norms > 0).astype(np.float32)
    return out


class Rounded:
    """The cached real embedder, its vectors of the stored roles rounded through `precision` while `storing`;
    every stored row kept (float32 and rounded) for the comparisons."""

    def __init__(self, inner: CachedEmbedder, precision: str, scales: dict[str, Vectors]) -> None:
        self.inner = inner
        self.precision = precision
        self.scales = scales
        self.storing = True
        self.fitted: dict[str, Vectors] = {}  # "int8 first-batch scales": each role's, from its first batch
        self.rows: dict[str, dict[str, tuple[Vectors, Vectors]]] = {role: {} for role in STORED}

    @property
    def identity(self) -> dict[str, Any]:
        return self.inner.identity

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def max_tokens(self) -> int | None:  # engram.embed.base.TokenLimited: passages split as the model's are
        limit: int | None = getattr(self.inner.inner, "max_tokens", None)
        return limit

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        counts: list[int] = self.inner.inner.count_tokens(texts)  # type: ignore[attr-defined]
        return counts

    def embed(self, texts: Sequence[str], role: Any = "passage", progress: Any = None) -> Vectors:
        raw = self.inner.embed(texts, role=role, progress=progress)
        if not self.storing or role not in STORED:
            return raw
        if self.precision == "int8 first-batch scales":
            scales = self.fitted.setdefault(role, fit_scales(raw))
            out = round_through(raw, "int8", scales)
        else:
            out = round_through(raw, self.precision, self.scales.get(role), role)
        for text, a, b in zip(texts, raw, out):
            self.rows[role][text] = (a, b)
        return out

    def table(self, role: str, texts: Sequence[str] | None = None) -> tuple[list[str], Vectors, Vectors]:
        """The role's texts (sorted, or `texts`), float32 rows and rounded rows."""
        kept = self.rows[role]
        names = sorted(kept) if texts is None else list(texts)
        if not names:
            empty = np.zeros((0, self.dim), dtype=np.float32)
            return names, empty, empty
        return names, np.stack([kept[t][0] for t in names]), np.stack([kept[t][1] for t in names])


def recalls(memory: Memory, questions: list[Question]) -> dict[str, float]:
    """'method R@k part' -> recall, for parts all / first / last (the first half and the held-out rest)."""
    half = len(questions) // 2
    out: dict[str, float] = {}
    for method in METHODS:
        result = run_method(memory, questions, MethodSpec(method, method), RunOptions(depth=20))
        for k in KS:
            scores = result.scores[f"recall@{k}"]
            for part, chosen in (("all", scores), ("first", scores[:half]), ("last", scores[half:])):
                out[f"{method} R@{k} {part}"] = mean(chosen)
    return out


def build(data: Path, folder: Path, embedder: Rounded, questions: list[Question]) -> dict[str, Any]:
    start = time.perf_counter()
    with Memory(folder, embedder=embedder, config=WIDE) as memory:
        memory.index(load_corpus(data / "corpus.jsonl"), extractions=data / RELEASED)
        embedder.storing = False  # from here on only queries are embedded: float32
        built = time.perf_counter() - start
        out: dict[str, Any] = {"build": built, "recall": recalls(memory, questions), "graph": memory.graph()}
    try:
        with Memory(folder, embedder=embedder, config=WIDE) as memory:
            again = recalls(memory, questions)
        out["reopens"] = "yes" if again == out["recall"] else "yes, other recalls"
    except MemoryFormatError:
        out["reopens"] = "no (check_vectors)"
    return out


def largest_cosine_changes(embedder: Rounded, base: Rounded, queries: Vectors) -> dict[str, float]:
    """Largest |rounded cosine - float32 cosine| over sampled fact-query pairs, every passage-query pair and
    sampled phrase-phrase pairs; the largest |length - 1| of a stored rounded row."""
    rng = np.random.default_rng(0)
    out: dict[str, float] = {}
    names, f32, low = embedder.table("fact", base.table("fact")[0])
    rows, cols = rng.integers(0, len(names), PAIRS), rng.integers(0, len(queries), PAIRS)
    diff = np.einsum("ij,ij->i", low[rows] - f32[rows], queries[cols])
    out["fact-query"] = float(np.abs(diff).max())
    _, p32, plow = embedder.table("passage", base.table("passage")[0])
    out["passage-query"] = float(np.abs((plow - p32) @ queries.T).max())
    _, h32, hlow = embedder.table("phrase", base.table("phrase")[0])
    a, b = rng.integers(0, len(h32), PAIRS), rng.integers(0, len(h32), PAIRS)
    cos = np.einsum("ij,ij->i", hlow[a], hlow[b]) - np.einsum("ij,ij->i", h32[a], h32[b])
    out["phrase-phrase"] = float(np.abs(cos).max())
    lengths = [np.abs(np.linalg.norm(t, axis=1) - 1.0) for t in (low, plow, hlow)]
    out["length"] = float(max(x.max() for x in lengths))
    out["length over"] = float(sum(int((x > NORM_TOLERANCE).sum()) for x in lengths))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=default_folder().parent / "minilm-vector-precision",
                        help="where texts the shared cache lacks are embedded and kept")  # fmt: skip
    parser.add_argument("--shared-cache", type=Path, default=default_folder(), help="read, never written")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated; float32 first")
    args = parser.parse_args()
    if not (args.data / "corpus.jsonl").exists():
        print(f"no shared data at {args.data} (--data names it): nothing to measure", file=sys.stderr)
        return 2
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if precisions[0] != "float32":
        precisions.insert(0, "float32")
    cached = CachedEmbedder(args.cache, read_also=[args.shared_cache])
    questions = load_questions(args.data / "questions.jsonl")
    queries = cached.embed([q.question for q in questions], role="query")
    results: dict[str, dict[str, Any]] = {}
    embedders: dict[str, Rounded] = {}
    scales: dict[str, Vectors] = {}
    with tempfile.TemporaryDirectory(prefix="engram-vprec-") as tmp:
        for i, precision in enumerate(precisions):
            print(f"{precision}: build and score ...", file=sys.stderr, flush=True)
            embedder = Rounded(cached, precision, scales)
            results[precision] = build(args.data, Path(tmp) / f"m{i}", embedder, questions)
            embedders[precision] = embedder
            if precision == "float32":  # the int8 scales: fitted over each role's whole float32 table
                scales.update({role: fit_scales(embedder.table(role)[1]) for role in STORED if embedder.rows[role]})
            print(f"  {results[precision]['build']:.0f} s; embedded {cached.embedded or 'nothing'} by the model",
                  file=sys.stderr, flush=True)  # fmt: skip
    base = results["float32"]
    columns = [f"{m} R@{k} {part}" for m in METHODS for k in KS for part in ("all", "first", "last")]
    print("Recall on the 50 shared MuSiQue questions (all / first 25 / last 25), no LLM; Δ: largest |change| from"
          " float32\n")  # fmt: skip
    print("| precision | " + " | ".join(c.replace(" all", "").replace(" first", " 1-25").replace(" last", " 26-50")
                                       for c in columns) + " | Δ | reopens |")  # fmt: skip
    print("|---" * (len(columns) + 3) + "|")
    for precision, r in results.items():
        delta = max(abs(r["recall"][c] - base["recall"][c]) for c in columns)
        cells = [f"{r['recall'][c]:.3f}" for c in columns]
        print(f"| {precision} | " + " | ".join(cells) + f" | {delta:.3f} | {r['reopens']} |")
    print("\nSynonym edges (by phrase pair) against float32's; largest |cosine change| of rounded against float32 "
          "vectors (queries float32)\n")  # fmt: skip
    print("| precision | synonym edges | kept | added | dropped | max Δ weight (kept) | fact-query (10k) "
          "| passage-query (all) | phrase-phrase (10k) | max abs(length - 1) | rows off > 1e-3 |")  # fmt: skip
    print("|---" * 11 + "|")
    edges32 = base["graph"].synonym_edges
    for precision, r in results.items():
        edges = r["graph"].synonym_edges
        kept = edges32.keys() & edges.keys()
        weight = max((abs(edges[e] - edges32[e]) for e in kept), default=0.0)
        cos = largest_cosine_changes(embedders[precision], embedders["float32"], queries)
        print(f"| {precision} | {len(edges):,} | {len(kept):,} | {len(edges.keys() - kept):,} | "
              f"{len(edges32.keys() - kept):,} | {weight:.2e} | {cos['fact-query']:.2e} | {cos['passage-query']:.2e} | "
              f"{cos['phrase-phrase']:.2e} | {cos['length']:.2e} | {int(cos['length over']):,} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
