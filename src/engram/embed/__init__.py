"""Embedders: turn texts into L2-normalised float32 vectors (see `engram.embed.base.Embedder`).

`make_embedder(spec)` builds one from a short spec string (CLI flag, $ENGRAM_EMBEDDER, config file):

* None, "", "minilm", "all-MiniLM-L6-v2" -> `MiniLMEmbedder()`, the bundled default (also "minilm:onnx",
  "minilm:torch" to force a backend; the vectors and identity are the same);
* "hash" or "hash:DIM" -> `HashEmbedder(DIM)` (deterministic, for tests);
* "st:NAME_OR_PATH" -> `SentenceTransformerEmbedder(NAME_OR_PATH)`;
* "openai:MODEL" -> `OpenAIEmbedder(MODEL)` at $ENGRAM_EMBED_BASE_URL (else $OPENAI_BASE_URL, else
  api.openai.com) with $OPENAI_API_KEY, $ENGRAM_EMBED_CONCURRENCY batches in flight (default 4).

Importing this package is cheap: torch, onnxruntime, sentence-transformers and openai load on first use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import cast

from engram.embed.base import Embedder, Progress, Role, Vectors, normalize_rows
from engram.embed.hashing import HashEmbedder
from engram.embed.local import Backend, MiniLMEmbedder
from engram.embed.openai_embed import OpenAIEmbedder
from engram.embed.st import SentenceTransformerEmbedder
from engram.errors import InputError

__all__ = [
    "Embedder",
    "HashEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "Progress",
    "Role",
    "SentenceTransformerEmbedder",
    "Vectors",
    "make_embedder",
    "normalize_rows",
    "spec_for",
]

_MINILM_NAMES = ("minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2")
SPEC_FORMS = (
    '"minilm" (the default; also "minilm:onnx" or "minilm:torch"), "hash" or "hash:DIM", '
    '"st:NAME_OR_PATH", "openai:MODEL"'
)


def make_embedder(spec: str | None = None, environ: Mapping[str, str] | None = None) -> Embedder:
    """The embedder a spec string names (forms in the module docstring). `environ` (default `os.environ`)
    supplies the OpenAI base URL and key. Unknown specs raise InputError listing the accepted forms."""
    text = (spec or "").strip()
    if text.lower() in ("", *_MINILM_NAMES):
        return MiniLMEmbedder()
    kind, sep, arg = text.partition(":")
    kind, arg = kind.strip().lower(), arg.strip()
    if kind == "minilm" and arg in ("auto", "onnx", "torch"):
        return MiniLMEmbedder(backend=cast(Backend, arg))
    if kind == "hash":
        return HashEmbedder(_hash_dim(arg) if sep else 256)
    if kind == "st" and arg:
        return SentenceTransformerEmbedder(arg)
    if kind == "openai" and arg:
        env = os.environ if environ is None else environ
        base_url = env.get("ENGRAM_EMBED_BASE_URL", "").strip() or env.get("OPENAI_BASE_URL", "").strip()
        api_key = env.get("OPENAI_API_KEY", "").strip()
        concurrency = env.get("ENGRAM_EMBED_CONCURRENCY", "").strip()
        if concurrency and not concurrency.isdigit():
            raise InputError(f"ENGRAM_EMBED_CONCURRENCY must be a whole number, not {concurrency!r}")
        return OpenAIEmbedder(
            arg, base_url=base_url or None, api_key=api_key or None, max_concurrency=int(concurrency or 4)
        )
    raise InputError(f"unknown embedder spec {spec!r}: use one of {SPEC_FORMS}")


def spec_for(identity: Mapping[str, object]) -> str | None:
    """The spec string that makes an embedder of `identity` (`Embedder.identity`, as a memory's manifest records
    it), or None for one no spec names (an Embedder object of the caller's own: pass it again)."""
    kind, model, dim = identity.get("kind"), identity.get("model"), identity.get("dim")
    if kind == "hash" and isinstance(dim, int):
        return f"hash:{dim}"
    if kind == "sentence-transformers" and isinstance(model, str) and model:
        return "minilm" if model.lower() in _MINILM_NAMES else f"st:{model}"
    if kind == "openai" and isinstance(model, str) and model:
        return f"openai:{model}"
    return None


def _hash_dim(arg: str) -> int:
    try:
        dim = int(arg)
    except ValueError:
        dim = 0
    if dim < 8:
        raise InputError(f"bad embedder spec 'hash:{arg}': DIM must be an integer >= 8, e.g. hash:256")
    return dim
