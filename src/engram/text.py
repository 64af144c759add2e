"""Unicode-safe normalisation and chunking."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

# Anything that is not a letter, a mark or a number, in any script, separates words.
_SEPARATORS = re.compile(r"[^\w]|_", re.UNICODE)
_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"\S+")


def normalize_phrase(text: str) -> str:
    """Key under which phrases are merged into one node.

    NFKC folds compatibility forms (full-width letters, ligatures), casefold lowers case in every script,
    punctuation becomes a space and runs of spaces collapse. Letters and digits of every script survive:
    "José Martí" -> "josé martí", "東京" -> "東京", "Москва" -> "москва".
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _SPACES.sub(" ", _SEPARATORS.sub(" ", folded)).strip()


def clean_text(text: str) -> str:
    """NFC-normalise and drop control characters other than newlines and tabs."""
    text = unicodedata.normalize("NFC", text)
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch)[0] != "C")


def valid_unicode(text: str) -> str:
    """`text` with lone surrogates (which no UTF-8 file or database can hold) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChunkConfig:
    """Word windows: documents of at most `max_words` words stay whole; longer ones are cut into windows of
    `max_words` words that overlap by `overlap` words. With `max_tokens`, a window longer than that many
    tokens (`engram.tokens`: a tokenizer file or the offline estimate) is cut further, without overlap, so
    that extraction prompts fit the model's context (`--max-input-tokens`)."""

    max_words: int = 300
    overlap: int = 50
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_words < 1 or not 0 <= self.overlap < self.max_words:
            raise ValueError("chunking needs max_words >= 1 and 0 <= overlap < max_words")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("chunking needs max_tokens >= 1 (or None)")


def chunk_text(text: str, config: ChunkConfig = ChunkConfig()) -> list[str]:
    """Split `text` into overlapping word windows, keeping the original spacing inside each window, then cut
    windows longer than `config.max_tokens` tokens."""
    windows = _word_windows(text, config)
    if config.max_tokens is None:
        return windows
    from engram.tokens import split_to_fit

    return [piece for window in windows for piece in split_to_fit(window, config.max_tokens)]


def _word_windows(text: str, config: ChunkConfig) -> list[str]:
    spans = [m.span() for m in _WORD.finditer(text)]
    if len(spans) <= config.max_words:
        stripped = text.strip()
        return [stripped] if stripped else []
    step = config.max_words - config.overlap
    chunks = []
    for start in range(0, len(spans), step):
        window = spans[start : start + config.max_words]
        chunks.append(text[window[0][0] : window[-1][1]])
        if start + config.max_words >= len(spans):
            break
    return chunks
