"""Token counting that works offline, and splitting text so it fits a token budget.

engram needs token counts before any call is made: to chunk documents so a prompt fits the model's context
(`--max-input-tokens`), to estimate a run (`engram index --dry-run`) and to pace requests under a
tokens-per-minute limit. The real tokenizer of the model behind an OpenAI-compatible URL is unknown, so:

* with `ENGRAM_TOKENIZER=/path/to/tokenizer.json` (a Hugging Face `tokenizers` file, shipped with every open
  model) and the `tokenizers` package installed, counts come from that tokenizer;
* otherwise `estimate_tokens` is used: one token per 4 ASCII characters (OpenAI's rule of thumb for English)
  plus one token per non-ASCII character. That slightly over-counts English and other Latin-script text and
  is close for CJK, where a character is about one token; over-counting is the safe side for a context limit.

Counts of chat messages add `MESSAGE_OVERHEAD` tokens per message for the role and separators.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from engram.errors import InputError, MissingDependencyError

TokenCount = Callable[[str], int]
MESSAGE_OVERHEAD = 4
_WORD = re.compile(r"\S+")
_lock = threading.Lock()


def estimate_tokens(text: str) -> int:
    """ceil(ASCII characters / 4) + non-ASCII characters: an offline over-estimate (see the module doc)."""
    ascii_chars = sum(1 for ch in text if ch < "\x80")
    return -(-ascii_chars // 4) + (len(text) - ascii_chars)


@lru_cache(maxsize=4)
def _tokenizer_file(path: str) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as error:
        raise MissingDependencyError(
            "ENGRAM_TOKENIZER needs the `tokenizers` package: pip install tokenizers (or unset it to use the "
            "built-in estimate)"
        ) from error
    if not Path(path).is_file():
        raise InputError(f"ENGRAM_TOKENIZER={path} is not a file: point it at a tokenizer.json")
    return Tokenizer.from_file(path)


def tokenizer_counter(path: str | Path) -> TokenCount:
    """A counter backed by a Hugging Face `tokenizer.json` file."""
    tokenizer = _tokenizer_file(str(path))

    def count(text: str) -> int:
        with _lock:  # Tokenizer objects are not documented as thread-safe
            return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


def default_counter() -> TokenCount:
    """The tokenizer named by $ENGRAM_TOKENIZER, else `estimate_tokens`."""
    path = os.environ.get("ENGRAM_TOKENIZER", "").strip()
    return tokenizer_counter(path) if path else estimate_tokens


def count_tokens(text: str, count: TokenCount | None = None) -> int:
    return (count or default_counter())(text)


def message_tokens(messages: Sequence[Mapping[str, object]], count: TokenCount | None = None) -> int:
    """Tokens of a chat request's messages, with `MESSAGE_OVERHEAD` per message."""
    counter = count or default_counter()
    return sum(counter(str(m.get("content", ""))) + MESSAGE_OVERHEAD for m in messages)


def split_to_fit(text: str, max_tokens: int, count: TokenCount | None = None) -> list[str]:
    """Cut `text` into consecutive pieces of at most `max_tokens` tokens each, at word boundaries (a single
    word longer than the budget is cut inside). Returns `[text]` when it fits already; blank text gives []."""
    if max_tokens < 1:
        raise InputError("a token budget must be at least 1")
    counter = count or default_counter()
    if not text.strip():
        return []
    if counter(text) <= max_tokens:
        return [text.strip()]
    spans = [m.span() for m in _WORD.finditer(text)]
    pieces: list[str] = []
    start = 0
    while start < len(spans):
        # the most words from `start` that still fit (binary search: counts grow with the window)
        low, high = start + 1, len(spans)
        while low < high:
            middle = (low + high + 1) // 2
            if counter(text[spans[start][0] : spans[middle - 1][1]]) <= max_tokens:
                low = middle
            else:
                high = middle - 1
        piece = text[spans[start][0] : spans[low - 1][1]]
        pieces.extend([piece] if counter(piece) <= max_tokens else _split_word(piece, max_tokens, counter))
        start = low
    return pieces


def _split_word(word: str, max_tokens: int, counter: TokenCount) -> list[str]:
    """Cut one over-long word into character runs that fit."""
    pieces: list[str] = []
    while word:
        low, high = 1, len(word)
        while low < high:
            middle = (low + high + 1) // 2
            if counter(word[:middle]) <= max_tokens:
                low = middle
            else:
                high = middle - 1
        pieces.append(word[:low])
        word = word[low:]
    return pieces
