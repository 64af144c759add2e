"""Relevant segment extraction (issue 14, `rse`): pure functions on hand-made inputs with known best segments,
and segments over a small memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engram import Document, Memory
from engram.embed.hashing import HashEmbedder
from engram.errors import InputError
from engram.retrieve.rse import RSEParams, best_segments, chunk_values, relevance, top_k_within


def test_chunk_values_decay_with_rank_and_unranked_chunks_cost_the_penalty() -> None:
    params = RSEParams(decay_rate=10, irrelevant_chunk_penalty=0.2)
    values = chunk_values([0, 10, -1], [1.0, 1.0, 0.9], params)
    assert values == pytest.approx([0.8, np.exp(-1) - 0.2, -0.2])
    assert relevance([3.0, 1.0, 2.0]).tolist() == [1.0, 0.0, 0.5]
    assert relevance([2.0, 2.0]).tolist() == [1.0, 1.0]


def test_a_weak_chunk_between_two_strong_ones_is_bridged_but_a_long_gap_is_not() -> None:
    values = [0.9, -0.1, 0.8, -0.2, -0.2, -0.2, -0.2, 0.7]
    runs = best_segments(values, [0] * 8, [1] * 8, budget=100, max_segment=100, minimum_value=0.5)
    assert runs == [(0, 3), (7, 8)]


def test_runs_stay_inside_one_document_and_within_the_lengths() -> None:
    values = [0.6, 0.6, 0.6, 0.6]
    groups = ["a", "a", "b", "b"]
    assert best_segments(values, groups, [1] * 4, 100, 100, 0.5) == [(0, 2), (2, 4)]
    # a run of at most 1 token per segment, 3 in all
    assert best_segments(values, groups, [1] * 4, 3, 1, 0.5) == [(0, 1), (1, 2), (2, 3)]
    # the budget is spent by the first segment: the second no longer fits
    assert best_segments([1.0, 0.9], ["a", "b"], [5, 5], 8, 100, 0.5) == [(0, 1)]


def test_segments_below_the_minimum_value_are_not_returned() -> None:
    assert best_segments([0.3, 0.1, -0.5, 0.4], [0] * 4, [1] * 4, 10, 10, 0.5) == []
    assert best_segments([0.3, 0.3, -0.5, 0.4], [0] * 4, [1] * 4, 10, 10, 0.5) == [(0, 2)]


def test_plain_top_k_at_a_budget_takes_the_longest_prefix_that_fits() -> None:
    assert top_k_within([100, 120, 90, 300], 310) == 3
    assert top_k_within([400], 300) == 0


def test_memory_segments_join_adjacent_chunks_of_one_document(tmp_path: Path) -> None:
    from engram.config import MemoryConfig
    from engram.text import ChunkConfig

    words = [f"filler{i}" for i in range(60)]
    words[20:24] = ["glacier", "expedition", "glacier", "expedition"]
    words[30:34] = ["glacier", "expedition", "glacier", "expedition"]
    config = MemoryConfig(chunk=ChunkConfig(max_words=10, overlap=0))
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False, config=config) as memory:
        memory.index([Document("long", " ".join(words)), Document("other", "glacier tours in another place")])
        params = RSEParams(candidates=3, minimum_value=0.1)
        found = memory.segments("glacier expedition", base="dense", budget_tokens=500, params=params)[0]
        plain = memory.retrieve("glacier expedition", top_k=2, method="rse-dense")[0]
    best = found.segments[0]
    assert [p.id for p in best.passages] == ["long#2", "long#3"]  # words 20-29 and 30-39: adjacent, in order
    assert best.tokens > 0 and "glacier" in best.text
    assert [p.id for p in plain.passages] == ["long#2", "long#3"]
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False) as memory, pytest.raises(InputError):
        memory.segments("x", base="rse-dense")
