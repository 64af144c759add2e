"""Fusions of dense cosines and BM25 scores, compared in seconds on the own-documents corpora.

Reads the memories `bench/own_docs.py` built and kept in its cache (run that first), asks each for every
passage's dense cosine and BM25 score per question (`Memory.retrieve` with `dense` and `bm25` over all
passages), then ranks the passages by each candidate fusion of the two and scores top-1 / top-5 as own_docs.py
does (a hit when a gold file is the document of one of the first k passages). One fusion is the library's
(`significance_scores`, the default for passage scores alone); the others are candidates written here, so a
new idea is a function in CANDIDATES and a re-run, not a change to the library. Ties are broken by passage id.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/own_docs_fusions.py
        [--corpus manpages,git-relnotes,manpages-5,debian-changelogs] [--cache DIR] [--out FILE.json]
        [--musique ../shared/data/musique-1890]

With --musique, a last column gives each fusion's recall@1/@2/@5 on the 50 shared MuSiQue questions (the share
of a question's gold passages among the first k, averaged; the memory of its 1,890 passages is built into the
cache once, a few minutes): multi-hop questions, where a fusion must keep the passages both signals half-like.

python-packages is held out from fusion choices: pass it by name only to check a choice already made.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.special import log_ndtr, logsumexp
from scipy.stats import gamma

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engram import Memory
from engram.index.view.bm25 import K1
from engram.retrieve.scoring import best_of_n_surprisal, hybrid_scores, significance_scores
from own_docs import DATA, default_cache, load_questions

Array = npt.NDArray[np.float64]
Fusion = Callable[[Array, Array], Array]
TUNING = ("manpages", "git-relnotes", "manpages-5", "debian-changelogs")


def normal_log_tail(scores: Array) -> Array:
    """log P(X >= score) per row, X normal with the row's mean and deviation."""
    z = (scores - scores.mean(axis=1, keepdims=True)) / np.maximum(scores.std(axis=1, keepdims=True), 1e-12)
    out: Array = log_ndtr(-z)
    return out


def gamma_log_tail(scores: Array) -> Array:
    """log P(S >= score) per row: the share of matching (positive) scores times a gamma fitted by moments to
    them; 0 for passages matching no query word."""
    out = np.zeros_like(scores)
    for row, values in zip(out, scores):
        hit = values > 0
        if not hit.any():
            continue
        x = values[hit]
        row[hit] = math.log(hit.sum() / len(values))
        mean, var = float(x.mean()), float(x.var())
        if len(x) > 1 and var > 1e-12 * mean * mean:
            row[hit] += gamma.logsf(x, mean * mean / var, scale=var / mean)
    return out


def upper_tail(scores: Array) -> Array:
    """log P(X >= score) per row: exponential above the (m+1)-th best score (m = ceil(sqrt(n))) with the mean
    excess of the m best as its scale; below it, the empirical share of scores at least as high."""
    n = scores.shape[1]
    m = min(max(1, math.ceil(math.sqrt(n))), n - 1)
    out = np.zeros_like(scores)
    for row, values in zip(out, scores):
        ordered = np.sort(values)
        row[:] = np.log((n - np.searchsorted(ordered, values, side="left")) / n)
        threshold = float(ordered[n - 1 - m])
        scale = float(ordered[n - m :].mean()) - threshold
        above = values > threshold
        if scale > 1e-12:
            row[above] = math.log(m / n) - (values[above] - threshold) / scale
    return out


def bm25_nats(scores: Array) -> Array:
    """BM25 read as a log-probability: (k1 + 1) x the score is, for a passage of average length holding each
    matched word once, the sum of the words' idf, about -log P(a passage holds them all) if words fall
    independently (Robertson and Spärck Jones); as log P, for the best-of-n correction."""
    out: Array = -(K1 + 1.0) * scores
    return out


def evidence(log_tail: Array) -> Array:
    return best_of_n_surprisal(log_tail, log_tail.shape[1])


def averaged_shares(*log_tails: Array) -> Array:
    """log of the mean over signals of each signal's distribution over passages, a passage weighed by 1 / p
    (its tail probability): Bayesian model averaging over which signal is right for the query, so a signal whose
    mass is shared by many alike passages gives way to one whose mass is held by a single passage."""
    shares = [-lt - logsumexp(-lt, axis=1, keepdims=True) for lt in log_tails]
    out: Array = logsumexp(np.stack(shares), axis=0) - math.log(len(shares))
    return out


def rrf(dense: Array, lexical: Array, k: float = 60.0) -> Array:
    """Reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009)."""
    out = np.zeros_like(dense)
    for scores in (dense, lexical):
        ranks = np.argsort(np.argsort(-scores, axis=1, kind="stable"), axis=1, kind="stable") + 1
        out += 1.0 / (k + ranks)
    return out


CANDIDATES: dict[str, Fusion] = {
    "dense": lambda d, b: d,
    "bm25": lambda d, b: b,
    "significance (library default)": lambda d, b: significance_scores(d, b),
    "normal + gamma, written here": lambda d, b: evidence(normal_log_tail(d)) + evidence(gamma_log_tail(b)),
    "mixture: shares by 1 / p, averaged": lambda d, b: averaged_shares(normal_log_tail(d), gamma_log_tail(b)),
    "weighted, share 0.2": lambda d, b: hybrid_scores(d, b, 0.2),
    "reciprocal rank fusion, k = 60": rrf,
    "max(normal, gamma)": lambda d, b: np.maximum(evidence(normal_log_tail(d)), evidence(gamma_log_tail(b))),
    "upper tails, both": lambda d, b: evidence(upper_tail(d)) + evidence(upper_tail(b)),
    "upper tail (dense) + gamma": lambda d, b: evidence(upper_tail(d)) + evidence(gamma_log_tail(b)),
    "normal + upper tail (bm25)": lambda d, b: evidence(normal_log_tail(d)) + evidence(upper_tail(b)),
    "normal + BM25 in nats": lambda d, b: evidence(normal_log_tail(d)) + evidence(bm25_nats(b)),
    "normal + gamma + BM25 in nats": lambda d, b: (
        evidence(normal_log_tail(d)) + evidence(gamma_log_tail(b)) + evidence(bm25_nats(b))
    ),
    "upper tail (dense) + BM25 in nats": lambda d, b: evidence(upper_tail(d)) + evidence(bm25_nats(b)),
}


def score_arrays(memory: Memory, questions: list[str], prefix: str, golds: list[set[str]]) -> dict[str, Array]:
    """Per question and passage (in passage-id order): cosine, BM25 score, and whether it is in a gold file."""
    n = int(memory.stats()["passages"])
    dense = memory.retrieve(questions, top_k=n, method="dense")
    bm25 = memory.retrieve(questions, top_k=n, method="bm25")
    ids = sorted(p.id for p in dense[0].passages)
    column = {pid: i for i, pid in enumerate(ids)}
    doc = {p.id: p.doc_id.removeprefix(prefix) for p in dense[0].passages}
    cos, lex = np.zeros((len(questions), n)), np.zeros((len(questions), n))
    gold = np.zeros((len(questions), n), dtype=bool)
    for qi, (d, b, wanted) in enumerate(zip(dense, bm25, golds)):
        for p in d.passages:
            cos[qi, column[p.id]] = p.score
        for p in b.passages:
            lex[qi, column[p.id]] = max(p.score, 0.0)
        gold[qi] = [doc[pid] in wanted for pid in ids]
    return {"dense": cos, "bm25": lex, "gold": gold}


def musique_arrays(data: Path, cache: Path) -> dict[str, Array]:
    """`score_arrays` on the shared MuSiQue data (gold: the passages of a question's gold documents)."""
    from engram.eval.data import load_corpus
    from engram.eval.data import load_questions as load_musique

    questions = load_musique(data / "questions.jsonl")
    with Memory(cache / "musique.engram", llm=False) as memory:
        if not memory.stats()["passages"]:
            memory.index(load_corpus(data / "corpus.jsonl"), extractions=data / "openie-gpt-3.5-turbo-1106.jsonl")
        return score_arrays(memory, [q.question for q in questions], "", [set(q.gold) for q in questions])


def recall_at(scores: Array, gold: npt.NDArray[np.bool_], k: int) -> float:
    """The share of each question's gold passages among its first k, averaged over the questions."""
    order = np.argsort(-scores, axis=1, kind="stable")
    hits = np.take_along_axis(gold, order, axis=1)[:, :k].sum(axis=1)
    return float((hits / np.maximum(gold.sum(axis=1), 1)).mean())


def first_gold(scores: Array, gold: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """1-based rank of each question's first gold passage (a large number when there is none)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    hits = np.take_along_axis(gold, order, axis=1)
    return np.where(hits.any(axis=1), hits.argmax(axis=1) + 1, 1 << 30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=",".join(TUNING), help="comma-separated corpora of own_docs.py")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="own_docs.py's cache")
    parser.add_argument("--out", type=Path, help="write the table as JSON here too")
    parser.add_argument("--musique", type=Path, help="the shared MuSiQue data folder: add its recall column")
    args = parser.parse_args()
    names = [c for c in args.corpus.split(",") if c]
    results: dict[str, dict[str, list[float]]] = {name: {} for name in CANDIDATES}
    for corpus in names:
        path = args.cache / f"{corpus}.engram"
        if not path.exists():
            print(f"no memory {path}: run bench/own_docs.py --corpus {corpus} first", file=sys.stderr)
            return 2
        questions = load_questions(DATA / f"own_docs_{corpus.replace('-', '_')}.jsonl")
        with Memory(path, llm=False) as memory:
            arrays = score_arrays(
                memory, [q.question for q in questions], f"{corpus}/", [set(q.gold) for q in questions]
            )
        for name, fusion in CANDIDATES.items():
            ranks = first_gold(fusion(arrays["dense"], arrays["bm25"]), arrays["gold"])
            results[name][corpus] = [float((ranks <= 1).mean()), float((ranks <= 5).mean())]
    if args.musique:
        if not (args.musique / "corpus.jsonl").exists():
            print(f"no MuSiQue data at {args.musique}", file=sys.stderr)
            return 2
        arrays = musique_arrays(args.musique, args.cache)
        for name, fusion in CANDIDATES.items():
            fused = fusion(arrays["dense"], arrays["bm25"])
            results[name]["musique"] = [recall_at(fused, arrays["gold"], k) for k in (1, 2, 5)]
    width = max(len(name) for name in CANDIDATES)
    head = "  ".join(f"{c[:13]:>13}" for c in names) + ("   musique r@1/@2/@5" if args.musique else "")
    print(f"{'top-1 / top-5':<{width}}  " + head)
    for name, row in results.items():
        cells = "  ".join(f"{row[c][0]:.3f} / {row[c][1]:.3f}" for c in names)
        if args.musique:
            cells += "   " + " / ".join(f"{x:.3f}" for x in row["musique"])
        print(f"{name:<{width}}  " + cells)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
