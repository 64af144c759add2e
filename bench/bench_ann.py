"""Which approximate nearest-neighbour library for synonym search (issue 11): faiss, hnswlib or usearch.

Two sets of 384-d unit vectors: the phrases of the scale corpus (`scale_corpus.py`) embedded with
`HashEmbedder(dim=384)`, and a clustered set (Gaussian clusters around random centres, like the clumps of a
sentence embedder's space). For each library and setting: the time to build an index of all vectors, the time
to search every vector's `k` nearest (what a from-scratch synonym build does), the index's memory, and the
recall of synonym pairs - the pairs at cosine >= 0.8 that exact search finds (each row's 100 nearest above the
threshold) - on 2,000 sampled rows, found by the row's own search ("recall") and by the row's or the partner's
("either side": a synonym edge joins two phrases when either keeps the other, so that is the edges' recall).
Rows whose `k` results are all above the threshold are searched again with a larger `k` (as the engram index
does), so the recall is that of the whole procedure.

    .venv/bin/python bench/bench_ann.py [--size 300000] [--threads 2] [--only REGEX]
    .venv/bin/python bench/bench_ann.py --vectors KEPT/s100000/m/index/gN/phrase.npy --size 200000
    .venv/bin/python bench/bench_ann.py --minilm-passages 30000 --threads 1 --only 'engram|IVF'

IVF range candidates (issue 54, `RangeIVF`): IVFFlat, IVFSQ8 and IVFSQfp16 with nlist = F x sqrt(N)
(`--nlist-factors`), searched at each `--nprobe` by `range_search` at 0.8 - slack, candidates re-scored exactly:
train, add and search-all time, serialized bytes per vector, the slack and the largest error measured, recall.
"""

from __future__ import annotations

import argparse
import itertools
import re
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.embed import HashEmbedder

Vectors = npt.NDArray[np.float32]
THRESHOLD, TOP_K, SAMPLE = 0.8, 100, 2000
SLACK = 1e-4  # as engram.graph.synonyms: float32 candidates this close below the threshold are re-checked
Search = Callable[[Vectors, int], tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]]


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def phrase_vectors(size: int) -> Vectors:
    from scale_corpus import Corpus

    corpus = Corpus(seed=7)
    passages = 0
    while len(corpus.phrases) < size:
        corpus.passage()
        passages += 1
    say(f"{size:,} phrases from {passages:,} passages; embedding")
    return HashEmbedder(dim=384).embed([p.lower() for p in corpus.phrases[:size]])


def minilm_phrases(passages: int) -> Vectors:
    """The all-MiniLM-L6-v2 vectors of the phrases (normalised, as engram embeds them) of the first `passages`
    passages of minilm_scale.py's corpus, in the order the corpus names them, from its vector cache."""
    from engram.text import normalize_phrase
    from minilm_scale import SEED
    from scale_corpus import Corpus
    from vector_cache import read_cached

    corpus = Corpus(seed=SEED)
    while corpus.made < passages:
        corpus.passage()
    say(f"{len(corpus.phrases):,} phrases from {passages:,} passages; reading their cached vectors")
    return read_cached([normalize_phrase(p) for p in corpus.phrases], "phrase")


def clustered_vectors(size: int, dim: int = 384, seed: int = 3) -> Vectors:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((size // 50, dim)).astype(np.float32)
    points = centres[rng.integers(0, len(centres), size)] + 0.55 * rng.standard_normal((size, dim)).astype(np.float32)
    out: Vectors = (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)
    return out


def confirmed(vectors: Vectors, q: int, targets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Of `targets` (float32 candidates within SLACK of the threshold), those whose cosine passes when recomputed
    in float64 and rounded to 1e-9, as engram's synonym search does: hash-embedded phrases sharing 4 of 5 words
    sit at exactly 0.8, where float32 sums land on either side depending on their order. Best first."""
    sims = np.round(vectors[targets].astype(np.float64) @ vectors[q].astype(np.float64), 9)
    keep = (sims >= THRESHOLD) & (targets != q)
    order = np.argsort(-sims[keep], kind="stable")
    return targets[keep][order]


def exact_pairs(vectors: Vectors, rows: npt.NDArray[np.int64]) -> set[tuple[int, int]]:
    out = set()
    for start in range(0, len(rows), 256):  # in blocks: 256 x rows float32 at a time
        block = rows[start : start + 256]
        for q, row in zip(block.tolist(), vectors[block] @ vectors.T):
            hits = confirmed(vectors, q, np.flatnonzero(row >= THRESHOLD - SLACK))[:TOP_K]
            out.update((q, int(t)) for t in hits)
    return out


def ann_pairs(search: Search, vectors: Vectors, rows: npt.NDArray[np.int64], k: int) -> set[tuple[int, int]]:
    """Pairs found by searching `k` neighbours, widening to TOP_K + 1 for rows whose k-th is still above."""
    sims, ids = search(vectors[rows], k)
    out = set()
    wide = [i for i in range(len(rows)) if sims[i, -1] >= THRESHOLD - SLACK]
    if wide:
        wsims, wids = search(vectors[rows[wide]], TOP_K + 1)
        for i, s, d in zip(wide, wsims, wids):
            hits = confirmed(vectors, int(rows[i]), d[(s >= THRESHOLD - SLACK) & (d >= 0)].astype(np.int64))
            out.update((int(rows[i]), int(t)) for t in hits)
    narrow = set(range(len(rows))) - set(wide)
    for i in narrow:
        hits = confirmed(vectors, int(rows[i]), ids[i][(sims[i] >= THRESHOLD - SLACK) & (ids[i] >= 0)].astype(np.int64))
        out.update((int(rows[i]), int(t)) for t in hits)
    return out


def either_side(search: Search, vectors: Vectors, truth: set[tuple[int, int]], k: int) -> set[tuple[int, int]]:
    """The true pairs (q, t) that t's own search finds (q in t's results): a synonym edge joins two phrases when
    either keeps the other, so an edge is missed only when both searches miss it."""
    partners = np.array(sorted({t for _, t in truth}), dtype=np.int64)
    if not len(partners):
        return set()
    back = ann_pairs(search, vectors, partners, k)
    return {(q, t) for q, t in truth if (t, q) in back}


def make_faiss_hnsw(vectors: Vectors, m: int, ef_build: int, ef: int) -> Search:
    import faiss

    index = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_build
    index.add(vectors)
    index.hnsw.efSearch = ef

    def search(q: Vectors, k: int) -> Any:
        index.hnsw.efSearch = max(ef, k)
        return index.search(q, k)

    search.index = index  # type: ignore[attr-defined]  # for its serialized size
    return search


def make_faiss_hnsw_sq(vectors: Vectors, m: int, ef_build: int, ef: int, kind: str = "QT_8bit") -> Search:
    """HNSW over 8-bit codes (a per-dimension range trained on the vectors; or `kind` QT_fp16): a quarter (half)
    of the memory of the float copy; the returned cosines are recomputed from the float vectors, as engram
    re-checks every candidate."""
    import faiss

    qtype = getattr(faiss.ScalarQuantizer, kind)
    index = faiss.IndexHNSWSQ(vectors.shape[1], qtype, m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_build
    index.train(vectors)
    index.add(vectors)

    def search(q: Vectors, k: int) -> Any:
        index.hnsw.efSearch = max(ef, k)
        _, ids = index.search(q, k)
        sims = np.einsum("ij,ikj->ik", q, vectors[np.maximum(ids, 0)])
        sims = np.where(ids >= 0, sims, -np.inf).astype(np.float32)
        order = np.argsort(-sims, axis=1, kind="stable")
        return np.take_along_axis(sims, order, 1), np.take_along_axis(ids, order, 1)

    search.index = index  # type: ignore[attr-defined]
    return search


def make_faiss_ivf(vectors: Vectors, nlist: int, nprobe: int) -> Search:
    import faiss

    quantizer = faiss.IndexFlatIP(vectors.shape[1])
    index = faiss.IndexIVFFlat(quantizer, vectors.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors[np.random.default_rng(0).choice(len(vectors), min(len(vectors), 40 * nlist), replace=False)])
    index.add(vectors)
    index.nprobe = nprobe

    def search(q: Vectors, k: int) -> Any:
        return index.search(q, k)

    search.index = index  # type: ignore[attr-defined]
    return search


class RangeIVF:
    """An IVF candidate search for synonyms (issue 54): faiss `IndexIVFFlat` or `IndexIVFScalarQuantizer`
    (`kind` QT_8bit or QT_fp16, codes of the residuals to the cell's centroid) over inner products, `nlist`
    cells trained on a sample (50 points per cell), `nprobe` cells (`index.nprobe`, set by the caller) searched
    by `range_search` at radius threshold - slack, every candidate then re-scored with the float32 vectors and
    the best TOP_K at >= the threshold kept, as engram re-checks candidates.

    The slack covers the codes' error: for a unit query q and a stored vector x decoded as x', the approximate
    cosine is off by |q . (x - x')| <= |x - x'| (Cauchy-Schwarz), so `slack` is the largest |x - x'| over the
    stored vectors (decoded through `sa_encode`/`sa_decode`, which also counts components clamped outside the
    trained range). The 8-bit codes' per-dimension bound (range / 255 per component: sqrt(sum (range/255)^2)) is
    kept in `bound` to print beside it; float32 and half-precision lists get the same measured slack."""

    def __init__(self, vectors: Vectors, kind: str, nlist: int) -> None:
        import faiss

        dim = vectors.shape[1]
        self.vectors, self.kind = vectors, kind
        self.quantizer = faiss.IndexFlatIP(dim)
        if kind == "flat":
            self.index = faiss.IndexIVFFlat(self.quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            qtype = getattr(faiss.ScalarQuantizer, kind)
            self.index = faiss.IndexIVFScalarQuantizer(self.quantizer, dim, nlist, qtype, faiss.METRIC_INNER_PRODUCT)
        sample = np.random.default_rng(0).choice(len(vectors), min(len(vectors), 50 * nlist), replace=False)
        start = time.perf_counter()
        self.index.train(vectors[np.sort(sample)])
        self.train_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for lo in range(0, len(vectors), 50_000):
            self.index.add(vectors[lo : lo + 50_000])
        self.add_seconds = time.perf_counter() - start
        self.bytes = len(faiss.serialize_index(self.index))
        self.bound = float("nan")
        if kind == "QT_8bit":
            trained = faiss.vector_to_array(self.index.sq.trained)  # per dimension: minimum, then range
            self.bound = float(np.linalg.norm(trained[dim:] / 255.0))
        worst = 0.0
        for lo in range(0, len(vectors), 20_000):
            part = vectors[lo : lo + 20_000]
            decoded = self.index.sa_decode(self.index.sa_encode(part))
            worst = max(worst, float(np.linalg.norm(part - decoded, axis=1).max()))
        self.slack = max(worst, SLACK)
        self.candidates = 0  # candidates returned by the range searches of `pairs_of` (sampled rows)
        self.error = 0.0  # the largest |approximate - exact| cosine among them

    def candidates_of(self, queries: Vectors) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], Any, Any]:
        """(query position, row, approximate cosine, exact cosine) of the range search's candidates."""
        lims, approx, ids = self.index.range_search(np.ascontiguousarray(queries), THRESHOLD - self.slack)
        qpos = np.repeat(np.arange(len(queries), dtype=np.int64), np.diff(lims).astype(np.int64))
        ids = ids.astype(np.int64)
        exact = np.empty(len(ids), dtype=np.float32)
        for lo in range(0, len(ids), 200_000):  # 200k candidate pairs x 2 x 1.5 KB at a time
            at = slice(lo, lo + 200_000)
            exact[at] = np.einsum("ij,ij->i", queries[qpos[at]], self.vectors[ids[at]])
        return qpos, ids, approx, exact

    def search_all(self, block: int = 2_000) -> int:
        """Every row's synonym list from scratch (what the timing measures): range search, exact re-score, the
        TOP_K best at >= THRESHOLD other than the row itself. Returns the pairs kept."""
        kept = 0
        for lo in range(0, len(self.vectors), block):
            qpos, ids, _, exact = self.candidates_of(self.vectors[lo : lo + block])
            keep = (exact >= THRESHOLD) & (ids != qpos + lo)
            qpos, exact = qpos[keep], exact[keep]
            order = np.lexsort((-exact, qpos))
            starts = np.searchsorted(qpos[order], qpos[order], side="left")
            kept += int(np.count_nonzero(np.arange(len(order)) - starts < TOP_K))
        return kept

    def pairs_of(self, rows: npt.NDArray[np.int64]) -> set[tuple[int, int]]:
        """The pairs the procedure keeps for `rows`, re-checked as `exact_pairs` checks (`confirmed`)."""
        out = set()
        for lo in range(0, len(rows), 2_000):
            block = rows[lo : lo + 2_000]
            qpos, ids, approx, exact = self.candidates_of(self.vectors[block])
            self.candidates += len(ids)
            if len(ids):
                self.error = max(self.error, float(np.abs(approx - exact).max()))
            cuts = np.searchsorted(qpos, np.arange(len(block) + 1))
            for i, q in enumerate(block.tolist()):
                hits = confirmed(self.vectors, q, ids[cuts[i] : cuts[i + 1]])[:TOP_K]
                out.update((q, int(t)) for t in hits)
        return out


IVF_KINDS = {"QT_8bit": "IVFSQ8", "QT_fp16": "IVFSQfp16", "flat": "IVFFlat"}


def ivf_candidates(size: int, factors: list[float], probes: list[int]) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """(kind, nlist, [(label, nprobe), ...]) of the IVF range candidates: nlist `factor` x sqrt(N)."""
    out = []
    for factor in factors:
        nlist = int(factor * np.sqrt(size))
        for kind, name in IVF_KINDS.items():
            out.append((kind, nlist, [(f"faiss {name} nlist{nlist} nprobe{p} range", p) for p in probes]))
    return out


def make_hnswlib(vectors: Vectors, m: int, ef_build: int, ef: int) -> Search:
    import hnswlib

    index = hnswlib.Index(space="ip", dim=vectors.shape[1])
    index.init_index(max_elements=len(vectors), M=m, ef_construction=ef_build)
    index.set_num_threads(THREADS)
    index.add_items(vectors, np.arange(len(vectors)))

    def search(q: Vectors, k: int) -> Any:
        index.set_ef(max(ef, k))
        ids, dist = index.knn_query(q, k=k)
        return (1.0 - dist).astype(np.float32), ids.astype(np.int64)

    return search


def make_usearch(vectors: Vectors, m: int, ef_build: int, ef: int, dtype: str) -> Search:
    from usearch.index import Index

    index = Index(ndim=vectors.shape[1], metric="cos", dtype=dtype, connectivity=m, expansion_add=ef_build,
                  expansion_search=ef)  # fmt: skip
    index.add(np.arange(len(vectors)), vectors, threads=THREADS)

    def search(q: Vectors, k: int) -> Any:
        index.expansion_search = max(ef, k)
        found = index.search(q, k, threads=THREADS)
        keys = np.where(found.distances < 1e30, found.keys.astype(np.int64), -1)  # padded rows: -1
        return (1.0 - found.distances).astype(np.float32), keys

    return search


THREADS = 2
IVF_FACTORS = [2.0, 4.0, 8.0]  # nlist = factor x sqrt(N)
IVF_PROBES = [4, 8, 16, 32]


def candidates(size: int) -> list[tuple[str, Callable[[Vectors], Search]]]:
    nlist = int(4 * np.sqrt(size))
    return [
        ("faiss HNSWFlat M8 efc40 ef32", lambda v: make_faiss_hnsw(v, 8, 40, 32)),
        ("faiss HNSWFlat M12 efc40 ef32", lambda v: make_faiss_hnsw(v, 12, 40, 32)),
        ("faiss HNSWFlat M16 efc20 ef32", lambda v: make_faiss_hnsw(v, 16, 20, 32)),
        ("faiss HNSWFlat M16 efc40 ef32", lambda v: make_faiss_hnsw(v, 16, 40, 32)),
        ("faiss HNSWFlat M16 efc80 ef32", lambda v: make_faiss_hnsw(v, 16, 80, 32)),
        ("faiss HNSWFlat M32 efc100 ef64", lambda v: make_faiss_hnsw(v, 32, 100, 64)),
        ("faiss HNSWFlat M16 efc160 ef64", lambda v: make_faiss_hnsw(v, 16, 160, 64)),
        ("faiss HNSWSQ8 M16 efc80 ef32", lambda v: make_faiss_hnsw_sq(v, 16, 80, 32)),
        ("faiss HNSWSQ8 M16 efc80 ef64", lambda v: make_faiss_hnsw_sq(v, 16, 80, 64)),
        ("faiss HNSWSQfp16 M16 efc80 ef32", lambda v: make_faiss_hnsw_sq(v, 16, 80, 32, "QT_fp16")),
        ("faiss HNSWSQfp16 M24 efc80 ef32 (engram)", lambda v: make_faiss_hnsw_sq(v, 24, 80, 32, "QT_fp16")),
        (f"faiss IVFFlat nlist{nlist} nprobe16", lambda v: make_faiss_ivf(v, nlist, 16)),
        (f"faiss IVFFlat nlist{nlist} nprobe64", lambda v: make_faiss_ivf(v, nlist, 64)),
        ("hnswlib M16 efc40 ef32", lambda v: make_hnswlib(v, 16, 40, 32)),
        ("hnswlib M16 efc100 ef32", lambda v: make_hnswlib(v, 16, 100, 32)),
        ("usearch i8 M16 efc64 ef32", lambda v: make_usearch(v, 16, 64, 32, "i8")),
        ("usearch i8 M16 efc128 ef32", lambda v: make_usearch(v, 16, 128, 32, "i8")),
        ("usearch f16 M16 efc128 ef32", lambda v: make_usearch(v, 16, 128, 32, "f16")),
        ("usearch f32 M16 efc128 ef32", lambda v: make_usearch(v, 16, 128, 32, "f32")),
    ]


def measure(name: str, vectors: Vectors, k: int, only: str) -> None:
    rows = np.sort(np.random.default_rng(1).choice(len(vectors), SAMPLE, replace=False)).astype(np.int64)
    start = time.perf_counter()
    truth = exact_pairs(vectors, rows)
    exact_seconds = (time.perf_counter() - start) * len(vectors) / SAMPLE
    say(f"[{name}] {len(truth)} exact pairs at >= {THRESHOLD} on {SAMPLE} rows")
    print(f"\n{name}: {len(vectors):,} vectors, {len(truth) / SAMPLE:.2f} synonym pairs per row, "
          f"exact search of all rows (projected from {SAMPLE}): {exact_seconds:.0f} s")  # fmt: skip
    print("| library, settings | build s | search all s | index MiB | bytes/vector | recall | recall, either side |")
    print("|---|---|---|---|---|---|---|")
    for label, make in candidates(len(vectors)):
        if not re.search(only, label):
            continue
        before = rss_mib()
        start = time.perf_counter()
        search = make(vectors)
        built = time.perf_counter() - start
        grown = rss_mib() - before
        index = getattr(search, "index", None)
        per_vector = len(faiss_module().serialize_index(index)) / len(vectors) if index is not None else float("nan")
        start = time.perf_counter()
        for lo in range(0, len(vectors), 10_000):  # with the re-search of rows whose k results all pass
            sims, _ = search(vectors[lo : lo + 10_000], k)
            wide = np.flatnonzero(sims[:, -1] >= THRESHOLD - SLACK)
            if len(wide):
                search(vectors[lo + wide], TOP_K + 1)
        searched = time.perf_counter() - start
        found = ann_pairs(search, vectors, rows, k)
        recall = len(found & truth) / max(1, len(truth))
        either = len(found & truth | either_side(search, vectors, truth, k)) / max(1, len(truth))
        print(f"| {label} | {built:.1f} | {searched:.1f} | {grown:.0f} | {per_vector:.0f} | {recall:.4f} | "
              f"{either:.4f} |", flush=True)  # fmt: skip
        del search, index
    measure_range(vectors, rows, truth, only)


def faiss_module() -> Any:
    import faiss

    return faiss


def measure_range(vectors: Vectors, rows: npt.NDArray[np.int64], truth: set[tuple[int, int]], only: str) -> None:
    """The IVF range candidates (`RangeIVF`) on the same sampled rows: one index per (kind, nlist), searched at
    each nprobe."""
    chosen = [(kind, nlist, [(label, p) for label, p in probes if re.search(only, label)])
              for kind, nlist, probes in ivf_candidates(len(vectors), IVF_FACTORS, IVF_PROBES)]  # fmt: skip
    chosen = [c for c in chosen if c[2]]
    if not chosen:
        return
    partners = np.array(sorted({t for _, t in truth}), dtype=np.int64)
    print(f"\nIVF range search at {THRESHOLD} - slack, candidates re-scored in float32, the best {TOP_K} kept; "
          f"slack = the largest |x - decoded x| over the stored vectors (8-bit bound: |range / 255| per "
          f"dimension); error = the largest |approximate - exact| cosine of the sampled rows' candidates")  # fmt: skip
    print("| library, settings | train s | add s | search all s | bytes/vector | slack (8-bit bound) | error | "
          "candidates/row | recall | recall, either side |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind, nlist, probes in chosen:
        ivf = RangeIVF(vectors, kind, nlist)
        for label, nprobe in probes:
            ivf.index.nprobe = nprobe
            ivf.candidates, ivf.error = 0, 0.0
            start = time.perf_counter()
            ivf.search_all()
            searched = time.perf_counter() - start
            found = ivf.pairs_of(rows)
            per_row = ivf.candidates / len(rows)
            back = ivf.pairs_of(partners) if len(partners) else set()
            recall = len(found & truth) / max(1, len(truth))
            either = len(found & truth | {(q, t) for q, t in truth if (t, q) in back}) / max(1, len(truth))
            print(f"| {label} | {ivf.train_seconds:.1f} | {ivf.add_seconds:.1f} | {searched:.1f} | "
                  f"{ivf.bytes / len(vectors):.0f} | {ivf.slack:.2e} ({ivf.bound:.2e}) | {ivf.error:.2e} | "
                  f"{per_row:.1f} | {recall:.4f} | {either:.4f} |", flush=True)  # fmt: skip
        del ivf


def measure_engram(name: str, vectors: Vectors, batches: int = 1, sizes: list[int] | None = None) -> None:
    """engram's own synonym search with approximate search forced (`SynonymLists(ann_min_rows=0)`: the default
    index, its candidates re-checked exactly, rows their own search misses paired as the library does), the rows
    added in `batches` equal batches (as a build adds them): time, and the recall of its edges (pairs in either
    phrase's list) on the sampled rows."""
    from engram.graph.synonyms import SynonymLists

    if sizes:
        vectors = vectors[: sum(sizes)]
    rows = np.sort(np.random.default_rng(1).choice(len(vectors), SAMPLE, replace=False)).astype(np.int64)
    truth = exact_pairs(vectors, rows)
    lists = SynonymLists(threshold=THRESHOLD, top_k=TOP_K, ann_min_rows=0)
    keys = [f"{i:09d}" for i in range(len(vectors))]
    cuts = np.linspace(0, len(vectors), batches + 1).astype(np.int64).tolist()
    if sizes:
        cuts = [0, *itertools.accumulate(sizes)]
    seconds = 0.0
    for a, b in itertools.pairwise(cuts):
        start = time.perf_counter()
        lists.add(np.arange(a, b, dtype=np.int64), np.arange(b, dtype=np.int64), lambda r: vectors[r], keys)
        seconds += time.perf_counter() - start
        if sizes:
            lost = len(getattr(lists.ann, "lost", ()))
            print(f"  rows {a:,}-{b:,}: {time.perf_counter() - start:.2f} s, {lost} lost", flush=True)
    edges = {(row, other) for row, items in lists.lists.items() for _, _, other in items}
    found = {(q, t) for q, t in truth if (q, t) in edges or (t, q) in edges}
    lost = len(getattr(lists.ann, "lost", ()))
    print(f"\n{name}: engram SynonymLists, approximate search forced, {len(vectors):,} rows in {len(cuts) - 1} "
          f"batch(es): "
          f"{seconds:.1f} s, {lost} rows their own search missed, edges' recall {len(found) / max(1, len(truth)):.4f} "
          f"of {len(truth)} sampled pairs", flush=True)  # fmt: skip


def main() -> int:
    global THREADS, SAMPLE, IVF_FACTORS, IVF_PROBES
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=300_000)
    parser.add_argument("--k", type=int, default=16, help="neighbours searched first (widened when all match)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sets", default="phrases,clustered")
    parser.add_argument(
        "--vectors",
        type=Path,
        help="measure on the first --size rows of this .npy instead of the sets, e.g. the "
        "phrase vectors a kept bench_scale.py memory holds (its index/g*/phrase.npy)",
    )
    parser.add_argument("--minilm-passages", type=int, default=0, help="measure on the MiniLM vectors of the "
                        "phrases of the first N passages of minilm_scale.py's corpus, read from its vector cache "
                        "(vector_cache.read_cached: read-only, no model), up to --size of them")  # fmt: skip
    parser.add_argument("--only", default="", help="regular expression: measure only the matching settings")
    parser.add_argument("--nlist-factors", default="2,4,8", help="IVF range candidates: nlist = F x sqrt(N)")
    parser.add_argument("--nprobe", default="4,8,16,32", help="IVF range candidates: cells searched")
    parser.add_argument("--engram", action="store_true", help="also engram's own synonym search (ANN forced)")
    parser.add_argument("--sample", type=int, default=SAMPLE, help="rows whose exact pairs the recall is over")
    parser.add_argument("--batches", type=int, default=1, help="--engram adds the rows in this many batches")
    parser.add_argument("--engram-only", action="store_true", help="only engram's synonym search")
    parser.add_argument("--sizes", default="", help="--engram adds batches of these many rows (comma-separated; "
                        "instead of --batches), each batch's time printed")  # fmt: skip
    args = parser.parse_args()
    THREADS, SAMPLE = args.threads, args.sample
    IVF_FACTORS = [float(x) for x in args.nlist_factors.split(",") if x]
    IVF_PROBES = [int(x) for x in args.nprobe.split(",") if x]
    sizes = [int(x) for x in args.sizes.split(",") if x]
    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)
    except ImportError:
        say("faiss not installed")
    if args.vectors is not None or args.minilm_passages:
        if args.vectors is not None:
            label = str(args.vectors)
            rows = np.load(args.vectors, mmap_mode="r", allow_pickle=False)[: args.size]
        else:
            label, rows = f"MiniLM phrases of {args.minilm_passages:,} passages", minilm_phrases(args.minilm_passages)
        chosen = np.ascontiguousarray(rows[: args.size], dtype=np.float32)
        if not args.engram_only:
            measure(label, chosen, args.k, args.only)
        if args.engram or args.engram_only:
            measure_engram(label, chosen, args.batches, sizes)
        return 0
    for name in args.sets.split(","):
        vectors = phrase_vectors(args.size) if name == "phrases" else clustered_vectors(args.size)
        if not args.engram_only:
            measure(name, vectors, args.k, args.only)
        if args.engram or args.engram_only:
            measure_engram(name, vectors, args.batches, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
