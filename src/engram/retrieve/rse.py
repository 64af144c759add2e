"""Relevant segment extraction (RSE), after spRAG/dsRAG: pure functions over arrays.

A ranking (dense, hipporag2, ...) scores some chunks. Every chunk of the documents it touched gets a value:
relevant chunks `exp(-rank / decay_rate) * relevance - irrelevant_chunk_penalty`, unranked ones
`-irrelevant_chunk_penalty`. A segment is a run of adjacent chunks of one document; its value is the sum of
its chunks' values, so a run may bridge a weak chunk between two strong ones but not a long irrelevant
stretch. Segments are chosen greedily, best first, without overlap, each within `max_segment_tokens`, all
within a total token budget, while the best remaining one is worth at least `minimum_value`.

Defaults are dsRAG's "balanced" preset: decay_rate 30, irrelevant_chunk_penalty 0.18, minimum_value 0.5. Its
lengths are in chunks (15 per segment, 30 in all) of about 800 characters, i.e. ~200 tokens: 3,000 and 6,000
tokens here. dsRAG's relevance comes from a reranker calibrated to [0, 1]; without one, relevance is the
ranking's own score min-max scaled over the ranked candidates (the best is 1, the weakest 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class RSEParams:
    """`candidates`: how many passages of the base ranking count as relevant (the rest of their documents'
    chunks are scored as irrelevant)."""

    decay_rate: float = 30.0
    irrelevant_chunk_penalty: float = 0.18
    minimum_value: float = 0.5
    max_segment_tokens: int = 3000
    candidates: int = 30

    def __post_init__(self) -> None:
        if self.decay_rate <= 0 or self.irrelevant_chunk_penalty < 0:
            raise ValueError("RSE needs decay_rate > 0 and irrelevant_chunk_penalty >= 0")
        if self.max_segment_tokens < 1 or self.candidates < 1:
            raise ValueError("RSE needs max_segment_tokens >= 1 and candidates >= 1")


def relevance(scores: npt.ArrayLike) -> FloatArray:
    """Scores min-max scaled to [0, 1] (all equal: all 1)."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values
    low, high = float(values.min()), float(values.max())
    if high - low <= 0:
        return np.ones_like(values)
    out: FloatArray = (values - low) / (high - low)
    return out


def chunk_values(ranks: npt.ArrayLike, relevances: npt.ArrayLike, params: RSEParams = RSEParams()) -> FloatArray:
    """Value of each chunk: `ranks` are 0-based ranks in the base ranking, -1 for an unranked chunk (whose
    relevance is ignored)."""
    rank = np.asarray(ranks, dtype=np.float64)
    rel = np.asarray(relevances, dtype=np.float64)
    ranked = rank >= 0
    values = np.full(rank.shape, -params.irrelevant_chunk_penalty, dtype=np.float64)
    values[ranked] += np.exp(-rank[ranked] / params.decay_rate) * rel[ranked]
    return values


def best_segments(
    values: npt.ArrayLike,
    groups: npt.ArrayLike,
    lengths: npt.ArrayLike,
    budget: int,
    max_segment: int,
    minimum_value: float,
) -> list[tuple[int, int]]:
    """Non-overlapping runs [start, end) of adjacent chunks, best first. `groups` holds each chunk's document
    (chunks of one document adjacent, in document order): a run never crosses from one group to another.
    `lengths` are the chunks' sizes; a run is at most `max_segment` long and all runs together at most
    `budget`. Stops when no run left is worth `minimum_value`."""
    value = np.asarray(values, dtype=np.float64)
    group = np.asarray(groups)
    length = np.asarray(lengths, dtype=np.int64)
    taken = np.zeros(len(value), dtype=bool)
    chosen: list[tuple[int, int]] = []
    left = budget
    while True:
        best = _best_run(value, group, length, taken, min(max_segment, left))
        if best is None or best[2] < minimum_value:
            return chosen
        start, end, _ = best
        chosen.append((start, end))
        taken[start:end] = True
        left -= int(length[start:end].sum())


def _best_run(
    value: FloatArray, group: npt.NDArray[np.generic], length: IntArray, taken: npt.NDArray[np.bool_], limit: int
) -> tuple[int, int, float] | None:
    """The run of the highest value over free chunks of one group within `limit` (ties: the earliest)."""
    best: tuple[int, int, float] | None = None
    for start in range(len(value)):
        total, size = 0.0, 0
        for end in range(start, len(value)):
            if taken[end] or group[end] != group[start] or size + length[end] > limit:
                break
            total += float(value[end])
            size += int(length[end])
            if best is None or total > best[2]:
                best = (start, end + 1, total)
    return best


def top_k_within(lengths: npt.ArrayLike, budget: int) -> int:
    """How many ranked passages fit `budget` when taken in rank order (the plain baseline at a token budget):
    the longest prefix whose lengths sum to at most `budget`."""
    sizes = np.cumsum(np.asarray(lengths, dtype=np.int64))
    return int(np.searchsorted(sizes, budget, side="right"))
