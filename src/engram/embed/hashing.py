"""`HashEmbedder`: a deterministic, dependency-free embedder for tests and offline smoke runs.

Each text becomes a signed, hashed bag of features: its lower-cased words (weight 1) and the character
trigrams of each word (weight 0.5, so that "founded"/"founder" still overlap). Features are hashed with
BLAKE2b, never Python's salted `hash()`, so vectors are identical across processes and machines. Texts that
share words score clearly higher than unrelated ones; there is no semantics beyond that.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from engram.embed._common import check_texts, empty
from engram.embed.base import Progress, Role, Vectors, normalize_rows
from engram.errors import InputError

_WORD = re.compile(r"\w+")
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.5


@lru_cache(maxsize=200_000)
def _slot(feature: str, dim: int) -> tuple[int, float]:
    """(column, sign) of one feature: the sign halves the bias that hash collisions add to cosines."""
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dim, (1.0 if value & 1 else -1.0)


def _features(text: str) -> list[tuple[str, float]]:
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    features = [("w:" + word, _WORD_WEIGHT) for word in words]
    for word in words:
        padded = f"<{word}>"
        features.extend(("c:" + padded[i : i + 3], _TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
    return features


class HashEmbedder:
    """Hashed bag of words and character trigrams, L2-normalised. `role` is ignored.

    A text without any word character (e.g. "" or "?!") embeds as a zero row.
    """

    def __init__(self, dim: int = 256) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 8:
            raise InputError(f"HashEmbedder needs an integer dim >= 8, got {dim!r}")
        self._dim = dim

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self._dim})"

    @property
    def identity(self) -> dict[str, Any]:
        return {"kind": "hash", "dim": self._dim}

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        items = check_texts(texts)
        if not items:
            return empty(self._dim)
        out = np.zeros((len(items), self._dim), dtype=np.float32)
        for row, text in enumerate(items):
            for feature, weight in _features(text):
                column, sign = _slot(feature, self._dim)
                out[row, column] += sign * weight
        if progress is not None:
            progress(len(items))
        return normalize_rows(out)
