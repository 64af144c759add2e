"""Offline token counting (the documented estimate, or a tokenizer file) and token-bounded chunking."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.errors import InputError
from engram.extract.planning import passage_token_budget, prompt_overhead
from engram.text import ChunkConfig, chunk_text
from engram.tokens import (
    MESSAGE_OVERHEAD,
    count_tokens,
    default_counter,
    estimate_tokens,
    message_tokens,
    split_to_fit,
    tokenizer_counter,
)


def test_estimate_is_a_quarter_per_ascii_char_and_one_per_other_char() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    assert estimate_tokens("東京都") == 3
    assert estimate_tokens("café") == 1 + 1  # "caf" -> 1, "é" -> 1
    assert message_tokens([{"role": "user", "content": "abcd"}]) == 1 + MESSAGE_OVERHEAD


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=400), budget=st.integers(min_value=1, max_value=40))
def test_split_to_fit_respects_the_budget_and_keeps_every_word(text: str, budget: int) -> None:
    pieces = split_to_fit(text, budget)
    assert all(estimate_tokens(p) <= budget for p in pieces)
    assert "".join("".join(p.split()) for p in pieces) == "".join(text.split())


def test_split_to_fit_cuts_at_words_and_inside_giant_words() -> None:
    text = "alpha beta gamma delta " + "x" * 30
    pieces = split_to_fit(text, 3)
    assert pieces[:2] == ["alpha beta", "gamma delta"]
    assert "".join(pieces[2:]) == "x" * 30 and all(len(p) <= 12 for p in pieces[2:])
    assert split_to_fit("  ", 5) == [] and split_to_fit("short", 5) == ["short"]
    with pytest.raises(InputError):
        split_to_fit("x", 0)


def test_chunk_text_applies_the_token_cap_after_the_word_windows() -> None:
    text = " ".join(f"w{i:03d}" for i in range(100))  # 100 words of 5 chars: 2 tokens each with the space
    assert chunk_text(text, ChunkConfig(max_words=300)) == [text]
    capped = chunk_text(text, ChunkConfig(max_words=300, max_tokens=50))
    assert len(capped) > 1 and all(estimate_tokens(c) <= 50 for c in capped)
    assert " ".join(capped) == text
    with pytest.raises(ValueError):
        ChunkConfig(max_tokens=0)


def test_passage_budget_leaves_room_for_the_prompt() -> None:
    overhead = prompt_overhead()
    budget = passage_token_budget(2048)
    assert 0 < budget < 2048 - overhead
    with pytest.raises(InputError, match=str(overhead)):
        passage_token_budget(overhead)


def test_a_tokenizer_file_replaces_the_estimate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tokenizer = tokenizers.Tokenizer(WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    count = tokenizer_counter(path)
    assert count("hello wonderful world") == 3  # one token per word, unlike the estimate
    monkeypatch.setenv("ENGRAM_TOKENIZER", str(path))
    assert count_tokens("a b c d e") == 5 and default_counter() is not estimate_tokens
    monkeypatch.setenv("ENGRAM_TOKENIZER", str(tmp_path / "missing.json"))
    with pytest.raises(InputError, match="not a file"):
        count_tokens("x")
