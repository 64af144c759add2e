"""Unicode-safe normalisation and chunking."""

from __future__ import annotations

import hashlib
import numbers
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from engram.errors import InputError

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
    """NFC-normalise, turn CR LF and lone CR into LF, and drop the other C0/C1 control characters (tab and
    newline stay). Everything else is kept exactly: format characters (U+FEFF, zero-width joiners, bidi
    marks) carry meaning in emoji sequences and several scripts, and private-use or not yet assigned code
    points are someone's text too. Lone surrogates are refused before this runs (`prepare.check_unicode`)."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cs"))


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
        whole = all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (self.max_words, self.overlap))
        if not whole or self.max_words < 1 or not 0 <= self.overlap < self.max_words:
            raise InputError("chunk settings need whole numbers max_words >= 1 and 0 <= overlap < max_words")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, numbers.Integral) or self.max_tokens < 1):
            raise InputError("chunk setting max_tokens must be a whole number >= 1 (or null)")


Fits = Callable[[str], bool]  # does this window, embedded, fit the embedder's input?


def chunk_text(text: str, config: ChunkConfig = ChunkConfig(), fits: Fits | None = None) -> list[str]:
    """Split `text` into overlapping word windows, keeping the original spacing inside each window, then cut
    windows longer than `config.max_tokens` tokens.

    With `fits` (the embedder's limit: `engram.embed.base.token_limit`), each window is also the longest run
    of at most `max_words` words that `fits` accepts, so no chunk is embedded truncated; consecutive windows
    overlap by `overlap` words, or by half the window where the window is shorter than twice that."""
    windows = _word_windows(text, config) if fits is None else _fitted_windows(text, config, fits)
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


def _fitted_windows(text: str, config: ChunkConfig, fits: Fits) -> list[str]:
    spans = [m.span() for m in _WORD.finditer(text)]
    if not spans:
        return []
    if len(spans) <= config.max_words and fits(text.strip()):
        return [text.strip()]
    if not fits(text[spans[0][0]]):  # not even one character fits (a title above the limit): words only
        return _word_windows(text, config)
    chunks: list[str] = []
    start = 0
    while start < len(spans):
        end = _longest_fit(text, spans, start, min(len(spans), start + config.max_words), fits)
        if end == start:  # one word longer than the limit: cut it by characters
            chunks.extend(_cut_word(text[spans[start][0] : spans[start][1]], fits))
            start += 1
            continue
        chunks.append(text[spans[start][0] : spans[end - 1][1]])
        if end >= len(spans):
            break
        start = max(start + 1, end - min(config.overlap, (end - start) // 2))
    return chunks


def _longest_fit(text: str, spans: list[tuple[int, int]], start: int, limit: int, fits: Fits) -> int:
    """The largest `end` in (start, limit] whose words start..end fit, or `start` if not even one word fits
    (binary search: a longer window never has fewer tokens)."""
    low, high = start, limit
    while low < high:
        middle = (low + high + 1) // 2
        if fits(text[spans[start][0] : spans[middle - 1][1]]):
            low = middle
        else:
            high = middle - 1
    return low


def _cut_word(word: str, fits: Fits) -> list[str]:
    """Character runs of one over-long word that fit (a run that cannot fit even one character is kept
    whole: the limit is then below what any text needs, e.g. a title longer than the model's input)."""
    pieces: list[str] = []
    while word:
        low, high = 0, len(word)
        while low < high:
            middle = (low + high + 1) // 2
            if fits(word[:middle]):
                low = middle
            else:
                high = middle - 1
        size = max(low, 1) if low else len(word)
        pieces.append(word[:size])
        word = word[size:]
    return pieces
