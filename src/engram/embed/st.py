"""`SentenceTransformerEmbedder`: any sentence-transformers model, by Hub name or local path."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from engram.embed._common import check_texts, empty, unique_texts
from engram.embed.base import Progress, Role, Vectors, normalize_rows
from engram.embed.local import LOCAL_EXTRA
from engram.errors import EngramError, InputError, MissingDependencyError

_CHUNK = 256  # texts per encode call (one progress report each)
_DOCUMENT_PROMPTS = ("document", "passage")


class SentenceTransformerEmbedder:
    """Embeds with `sentence_transformers.SentenceTransformer(name_or_path)` on CPU (or `device`).

    Queries (role="query") get `query_prompt` when given, else the model's own "query" prompt when its
    config defines one; other roles get the model's "document" (or "passage") prompt when it defines one.
    A Hub name is resolved by sentence-transformers as usual (it downloads unless HF_HUB_OFFLINE=1 and the
    model is cached). The model loads lazily; `identity` and `dim` load it, since the dimension comes from
    the model. Thread-safe.
    """

    def __init__(
        self,
        name_or_path: str,
        query_prompt: str | None = None,
        *,
        batch_size: int = 32,
        device: str = "cpu",
    ) -> None:
        if not name_or_path or not name_or_path.strip():
            raise InputError("SentenceTransformerEmbedder needs a model name or path")
        self.name = name_or_path.strip()
        self.query_prompt = query_prompt
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None
        self._dim = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.name!r})"

    @property
    def identity(self) -> dict[str, Any]:
        return {"kind": "sentence-transformers", "model": self.name, "dim": self.dim}

    @property
    def dim(self) -> int:
        self._load()
        return self._dim

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model, self._dim = _load_model(self.name, self.device)
            return self._model

    def _prompt_kwargs(self, model: Any, role: Role) -> dict[str, Any]:
        prompts: dict[str, str] = dict(getattr(model, "prompts", None) or {})
        if role == "query":
            if self.query_prompt is not None:
                return {"prompt": self.query_prompt}
            return {"prompt_name": "query"} if prompts.get("query") else {}
        for name in _DOCUMENT_PROMPTS:
            if prompts.get(name):
                return {"prompt_name": name}
        return {}  # sentence-transformers then applies the model's default prompt, if it has one

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        items = check_texts(texts)
        if not items:
            return empty(self.dim)
        model = self._load()
        kwargs = self._prompt_kwargs(model, role)
        distinct, where = unique_texts(items)
        order = sorted(range(len(distinct)), key=lambda i: -len(distinct[i]))
        out = np.zeros((len(distinct), self._dim), dtype=np.float32)
        for start in range(0, len(order), _CHUNK):
            chunk = order[start : start + _CHUNK]
            vectors = model.encode(
                [distinct[i] for i in chunk],
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                **kwargs,
            )
            out[chunk] = np.asarray(vectors, dtype=np.float32)
            if progress is not None:
                progress(round(min(start + _CHUNK, len(order)) * len(items) / len(distinct)))
        return normalize_rows(out[where])


def _load_model(name: str, device: str) -> tuple[Any, int]:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise MissingDependencyError(f"sentence-transformers is not installed: {LOCAL_EXTRA}") from exc
    try:
        model = SentenceTransformer(name, device=device)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load the sentence-transformers model {name!r}: {exc}") from exc
    measure = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = measure()
    if not dim:
        dim = int(np.asarray(model.encode(["dimension probe"], convert_to_numpy=True)).shape[-1])
    if dim <= 0:
        raise EngramError(f"the sentence-transformers model {name!r} reports no embedding dimension")
    return model, int(dim)
