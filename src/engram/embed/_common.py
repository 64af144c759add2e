"""Helpers shared by the embedders: input checks and de-duplication."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engram.embed.base import Vectors
from engram.errors import InputError


def check_texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list, or InputError when `texts` is a bare string or holds a non-string."""
    if isinstance(texts, (str, bytes)):
        raise InputError("embed() takes a list of strings, not a single string: wrap it in a list")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise InputError(f"embed() takes strings; item {i} is a {type(text).__name__}")
    return out


def unique_texts(texts: Sequence[str]) -> tuple[list[str], list[int]]:
    """(distinct texts in first-seen order, position of each input text among them)."""
    first: dict[str, int] = {}
    where = [first.setdefault(text, len(first)) for text in texts]
    return list(first), where


def empty(dim: int) -> Vectors:
    return np.zeros((0, dim), dtype=np.float32)
