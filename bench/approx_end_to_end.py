"""End-to-end recall when the query-to-fact and dense passage searches read only an IVF partition's probed cells
(issue 54): `bench_fact_ann.py` and `minilm_scale.py` measure how much of a query's exact top 5 the probed cells
hold; this measures what the default method (`hipporag2`, no LLM) then retrieves on the shared MuSiQue questions.

For each setting the bench replaces `GraphIndex.fact_scores` and/or `GraphIndex.dense_scores` (this process only;
the library is unchanged) by an approximate search over the view's alive rows:

* the partition: `bench_fact_ann.partition` (faiss spherical k-means, `nlist` cells, every alive row in the cell
  of its nearest centre), trained once per (kind, nlist) on the memory's own vectors;
* a query's candidates: the alive rows in its `nprobe` nearest cells (by the dot with the centres; more cells if
  those are empty), each given its exact float32 cosine by the library's own kernel (`row_dots`, the float the
  exact scan gives that row);
* every other row, alive or dead, gets the lowest candidate score. That is what the exact scan does for dead rows
  (the lowest alive score), so a row outside the probed cells counts as if it were not there: it ranks below
  (or ties with) every candidate, min-max scaling spans the candidates' range only, and the exponential weights
  (`fact_temperature`, `prior_temperature`) give it the weight of the worst candidate, not an invented lower one
  that would depend on a made-up floor. `top`/`lowest` are ignored: the scores are complete for every row.

The default method's passage scores add 0.2 x BM25 (`lexical_weight`) to the cosine; BM25 stays exact, so a
passage outside the probed cells can still rank by its BM25 share. Phrase scores (synonyms) are not touched.

The exact row is the library unpatched; a partition probed in all its cells must give exactly its recall (checked
and printed). Recall is `engram.eval.runner.run_method` (the runner behind `engram eval` and `results.py`),
depth 20, on all questions and on the first and last halves (per-question values of one run over all). "read" is
the mean share of alive rows a query's candidates are (facts / passages); "questions changed" numbers (from 1, in
the file's order) the questions whose recall@2 or @5 differs from the exact row's.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/approx_end_to_end.py --memory /tmp/exp/musique.engram \\
        [--questions ../shared/data/musique-1890/questions.jsonl]

About 20 s on the shared MiniLM memory (1,930 passages, 16,900 facts) on one core. Exit status 1 when probing
every cell does not reproduce the exact recall.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fact_ann import partition
from engram import Memory
from engram.eval.data import Question, load_questions
from engram.eval.metrics import mean
from engram.eval.runner import MethodSpec, RunOptions, run_method
from engram.graph.parallel import row_dots
from engram.index.view.graph_index import GraphIndex
from minilm_scale import rows_of

HERE = Path(__file__).resolve().parent
DEFAULT_QUESTIONS = HERE.parents[1] / "shared" / "data" / "musique-1890" / "questions.jsonl"
METHOD = "hipporag2"
FACTS = ((128, 8), (128, 16), (128, 32), (128, 64))
PASSAGES = ((32, 8), (32, 16), (32, 24))
BOTH = (((128, 32), (32, 8)), ((128, 64), (32, 16)))
# bench/RESULTS.md's default-method row on this memory: R@2, R@5 on all 50, R@5 on the last 25
RESULTS_MD = {"r2": 0.590, "r5": 0.793, "held5": 0.723}
FloatArray = npt.NDArray[np.float64]


@dataclass
class Cells:
    """One kind's IVF partition of a view's alive rows, and the share of them each query probed."""

    vectors: npt.NDArray[np.float32]  # the alive rows, in RAM
    rows: npt.NDArray[np.int64]  # their row numbers in the view
    centres: npt.NDArray[np.float32]
    members: list[npt.NDArray[np.int64]]  # positions in `vectors` of each cell's rows
    nprobe: int = 1
    read: list[float] = field(default_factory=list)

    @classmethod
    def train(cls, vectors: npt.NDArray[np.float32], rows: npt.NDArray[np.int64], nlist: int) -> Cells:
        centres, cell = partition(vectors, nlist)
        order = np.argsort(cell, kind="stable")
        members = np.split(order, np.cumsum(np.bincount(cell, minlength=nlist))[:-1])
        return cls(vectors, rows, centres, [m.astype(np.int64) for m in members])

    def scores(self, query_vectors: npt.ArrayLike, size: int) -> FloatArray:
        """(q, size) scores: the probed candidates' exact cosines, every other row the lowest of them."""
        q = np.asarray(query_vectors, dtype=np.float32).reshape(-1, self.vectors.shape[1])
        out = np.empty((len(q), size), dtype=np.float64)
        for qi, vector in enumerate(q):
            order = np.argsort(-(self.centres @ vector), kind="stable")
            probed = self.nprobe
            while True:  # an empty cell holds nothing: probe further until some row is found
                candidates = np.concatenate([self.members[c] for c in order[:probed]])
                if len(candidates) or probed >= len(order):
                    break
                probed += 1
            exact = row_dots(np.ascontiguousarray(self.vectors[candidates]), vector)
            out[qi] = float(exact.min()) if len(exact) else 0.0
            out[qi, self.rows[candidates]] = exact
            self.read.append(len(candidates) / len(self.rows))
        return out


@contextmanager
def approximate(facts: Cells | None, passages: Cells | None) -> Iterator[None]:
    """`GraphIndex.fact_scores` / `dense_scores` answered by the given partitions while inside."""
    saved = GraphIndex.fact_scores, GraphIndex.dense_scores

    def fact_scores(self: GraphIndex, query_vectors: npt.ArrayLike, top: int | None = None,
                    lowest: bool = True) -> FloatArray:  # fmt: skip
        assert facts is not None
        return facts.scores(query_vectors, len(self.fact_alive))

    def dense_scores(self: GraphIndex, query_vectors: npt.ArrayLike) -> FloatArray:
        assert passages is not None
        return passages.scores(query_vectors, len(self.passage_alive))

    try:
        if facts is not None:
            GraphIndex.fact_scores = fact_scores  # type: ignore[method-assign]
        if passages is not None:
            GraphIndex.dense_scores = dense_scores  # type: ignore[method-assign]
        yield
    finally:
        GraphIndex.fact_scores, GraphIndex.dense_scores = saved  # type: ignore[method-assign]


@dataclass(frozen=True)
class Recall:
    """recall@2 and @5 on all questions and on each half (`means`), and each question's pair (`each`)."""

    means: dict[str, float]
    each: list[tuple[float, float]]


def recall(memory: Memory, questions: list[Question]) -> Recall:
    """The default method's recall (one run over all questions, halves from its per-question values)."""
    result = run_method(memory, questions, MethodSpec(METHOD, METHOD), RunOptions(depth=20))
    half = len(questions) // 2
    out: dict[str, float] = {}
    for k in (2, 5):
        per = result.scores[f"recall@{k}"]
        out[f"all{k}"], out[f"first{k}"], out[f"last{k}"] = mean(per), mean(per[:half]), mean(per[half:])
    return Recall(out, list(zip(result.scores["recall@2"], result.scores["recall@5"])))


def row(label: str, r: Recall, exact: Recall, facts: Cells | None, passages: Cells | None) -> str:
    read = [f"{100 * mean(c.read):.1f} %" if c is not None else "100 %" for c in (facts, passages)]
    values = " | ".join(f"{r.means[f'{part}{k}']:.3f}" for part in ("all", "first", "last") for k in (2, 5))
    changed = [str(i + 1) for i, (a, b) in enumerate(zip(r.each, exact.each)) if a != b]
    return f"| {label} | {values} | {read[0]} | {read[1]} | {', '.join(changed) or '-'} |"


def setting(cells: dict[tuple[str, int], Cells], kind: str, nlist: int, nprobe: int) -> Cells:
    c = cells[(kind, nlist)]
    c.nprobe, c.read = nprobe, []
    return c


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory", type=Path, required=True, help="a MiniLM memory of the shared MuSiQue data")
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS)
    args = parser.parse_args()
    if not args.questions.exists():
        print(f"no questions at {args.questions}", file=sys.stderr)
        return 2
    questions = load_questions(args.questions)
    start = time.perf_counter()
    with Memory(args.memory, llm=False, create=False) as memory:
        view = memory.context().view
        stats = memory.stats()
        print(f"{args.memory}: {stats['passages']:,} passages, {stats['facts']:,} facts; {len(questions)} questions; "
              f"method {METHOD}, no LLM")  # fmt: skip
        alive = {"facts": np.flatnonzero(view.fact_alive), "passages": np.flatnonzero(view.passage_alive)}
        vectors = {kind: rows_of(memory, kind) for kind in alive}
        lists = {("facts", n) for n, _ in FACTS} | {("passages", n) for n, _ in PASSAGES}
        cells: dict[tuple[str, int], Cells] = {}
        for kind, nlist in sorted(lists):
            cells[(kind, nlist)] = Cells.train(vectors[kind], alive[kind].astype(np.int64), nlist)
            sizes = [len(m) for m in cells[(kind, nlist)].members]
            print(f"IVF over {kind}, {nlist} cells: largest {max(sizes):,} rows, empty {sizes.count(0)}")
        print()
        print("| scores | R@2 | R@5 | R@2 first 25 | R@5 first 25 | R@2 last 25 | R@5 last 25 | facts read |"
              " passages read | questions changed |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        exact = recall(memory, questions)
        print(row("exact", exact, exact, None, None))
        for nlist, nprobe in FACTS:
            f = setting(cells, "facts", nlist, nprobe)
            with approximate(f, None):
                print(row(f"IVF facts ({nlist}, {nprobe})", recall(memory, questions), exact, f, None))
        for nlist, nprobe in PASSAGES:
            p = setting(cells, "passages", nlist, nprobe)
            with approximate(None, p):
                print(row(f"IVF passages ({nlist}, {nprobe})", recall(memory, questions), exact, None, p))
        for (fl, fp), (pl, pp) in BOTH:
            f, p = setting(cells, "facts", fl, fp), setting(cells, "passages", pl, pp)
            label = f"IVF both, facts ({fl}, {fp}), passages ({pl}, {pp})"
            with approximate(f, p):
                print(row(label, recall(memory, questions), exact, f, p))
        f = setting(cells, "facts", FACTS[0][0], FACTS[0][0])
        p = setting(cells, "passages", PASSAGES[0][0], PASSAGES[0][0])
        with approximate(f, p):
            every = recall(memory, questions)
    print()
    same = every.each == exact.each
    print(f"every cell probed (both searches): {'the same recall as exact' if same else 'DIFFERS from exact'}")
    mine = {"r2": exact.means["all2"], "r5": exact.means["all5"], "held5": exact.means["last5"]}
    agree = all(abs(mine[k] - v) < 5e-4 for k, v in RESULTS_MD.items())
    print("exact against bench/RESULTS.md's default row (R@2 / R@5 / R@5 last 25): "
          f"{mine['r2']:.3f} / {mine['r5']:.3f} / {mine['held5']:.3f} here, "
          f"{RESULTS_MD['r2']:.3f} / {RESULTS_MD['r5']:.3f} / {RESULTS_MD['held5']:.3f} there: "
          f"{'match' if agree else 'DIFFER'}")  # fmt: skip
    print(f"{time.perf_counter() - start:.0f} s")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
