"""A view's phrase names are a fixed prefix of the state's append-only list (engram.index.state.saved_tables.Prefix),
not a copy: the prefix against the list's slice taken when it was made, while the list grows; and a view kept
across later commits that add phrases still shows the phrases it had."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.index.state.saved_tables import Prefix


@given(
    st.lists(st.text(max_size=3), max_size=12),
    st.data(),
    st.lists(st.text(max_size=3), max_size=6),
)
def test_prefix_reads_as_the_lists_slice_when_made(items: list[str], data: st.DataObject, later: list[str]) -> None:
    count = data.draw(st.integers(0, len(items)))
    prefix = Prefix(items, count)
    oracle = items[:count]  # a copy, taken before the list grows
    items.extend(later)
    assert len(prefix) == len(oracle)
    assert list(prefix) == oracle
    for i in range(-len(oracle) - 2, len(oracle) + 2):
        if -len(oracle) <= i < len(oracle):
            assert prefix[i] == oracle[i]
        else:
            with pytest.raises(IndexError):
                prefix[i]
    start, stop, step = (data.draw(st.integers(-15, 15)) for _ in range(3))
    if step:
        assert prefix[start:stop:step] == oracle[start:stop:step]
    for value in set(later) - set(oracle):
        assert value not in prefix
    for value in oracle:
        assert value in prefix and prefix.index(value) == oracle.index(value)


def test_prefix_longer_than_its_list_is_refused() -> None:
    with pytest.raises(ValueError):
        Prefix(["a"], 2)


def test_a_kept_view_shows_its_own_phrases_after_later_commits(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m", embedder=HashEmbedder(dim=64))
    first = {"id": "d1", "entities": ["Ada Lovelace"], "triples": [["Ada Lovelace", "wrote", "the first program"]]}
    memory.index([Document("d1", "Ada Lovelace wrote the first program.")], extractions=[first])
    old = memory.context().view
    before = list(old.tables.phrases)
    triple = ["Charles Babbage", "designed", "the analytical engine"]
    second = {"id": "d2", "entities": ["Charles Babbage"], "triples": [triple]}
    memory.index([Document("d2", "Charles Babbage designed the analytical engine.")], extractions=[second])
    new = memory.context().view
    assert list(old.tables.phrases) == before and len(old.tables.phrases) == len(before)
    assert "charles babbage" in new.tables.phrases and "charles babbage" not in old.tables.phrases
    assert list(new.tables.phrases)[: len(before)] == before  # rows never move
    memory.close()
