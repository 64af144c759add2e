"""The two MiniLM backends side by side: onnxruntime (engram's default) against sentence-transformers on torch,
on the shared MuSiQue passages: seconds for the same texts (both warmed up first) and the cosine between the
two backends' vectors for every text (min, median).

    .venv/bin/python bench/bench_embed.py [--data ../shared/data/musique-1890] [--limit 600]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from engram.embed.local import MiniLMEmbedder
from engram.eval.data import load_corpus

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"


def timed(embedder: MiniLMEmbedder, texts: list[str]) -> tuple[float, np.ndarray]:
    embedder.embed(texts[:8])  # load the model outside the timing
    start = time.perf_counter()
    vectors = embedder.embed(texts)
    return time.perf_counter() - start, np.asarray(vectors)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=600, help="passages embedded by each backend")
    args = parser.parse_args()
    if not (args.data / "corpus.jsonl").exists():
        print(f"no data at {args.data}: nothing to measure", file=sys.stderr)
        return 2
    texts = [f"{d.title}\n{d.text}" for d in load_corpus(args.data / "corpus.jsonl")[: args.limit]]
    onnx_s, onnx_v = timed(MiniLMEmbedder("onnx"), texts)
    torch_s, torch_v = timed(MiniLMEmbedder("torch"), texts)
    cosines = np.sum(onnx_v * torch_v, axis=1)  # rows are L2-normalised
    print(f"{len(texts)} passages: onnx {onnx_s:.2f} s, torch {torch_s:.2f} s, torch/onnx {torch_s / onnx_s:.2f}x")
    print(f"cosine onnx vs torch per text: min {cosines.min():.7f}, median {np.median(cosines):.7f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
