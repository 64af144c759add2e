"""Synonym lists taken back from a saved state (issue 11): left unbuilt until a change needs them, read from the
saved arrays until then. Oracle: the lists the arrays were saved from, and the same changes applied to them."""

from __future__ import annotations

import numpy as np

from engram.embed import HashEmbedder
from engram.graph.synonyms import SynonymLists


def names(count: int) -> list[str]:
    rng = np.random.default_rng(3)
    out: list[str] = []
    while len(out) < count:
        if out and rng.random() < 0.3:  # a variant of an earlier name: the pairs the search finds
            name = out[int(rng.integers(0, len(out)))] + ("s" if rng.random() < 0.5 else " ka")
        else:
            name = " ".join("".join(rng.choice(list("bdklmnprst"), 3)) + "a" for _ in range(rng.integers(1, 4)))
        if name not in out:
            out.append(name)
    return out


def test_restored_lists_read_from_the_arrays_then_build_equal() -> None:
    keys = names(600)
    vectors = HashEmbedder(dim=64).embed(keys)
    rows = np.arange(500, dtype=np.int64)
    original = SynonymLists(threshold=0.8)
    original.add(rows, rows, lambda r: vectors[r], keys)
    assert original.edge_count() > 50  # the names have synonym pairs
    restored = SynonymLists(threshold=0.8)
    restored.restore(original.saved(), keys)

    for got, want in zip(restored.edges(), original.edges()):
        assert np.array_equal(got, want) and got.dtype == want.dtype
    assert restored.edge_count() == original.edge_count()
    assert all(np.array_equal(restored.saved()[k], v) for k, v in original.saved().items())
    pairs, cosines = original.edges()
    assert [restored.weight((a, b)) for a, b in pairs.tolist()] == cosines.tolist()  # read from the arrays
    assert [restored.list_of(r) for r in range(500)] == [original.list_of(r) for r in range(500)]
    assert not restored.lists.changed()  # nothing above set a list

    new, dead = np.arange(500, 600, dtype=np.int64), np.arange(0, 40, dtype=np.int64)
    alive = np.arange(40, 600, dtype=np.int64)
    unread = SynonymLists(threshold=0.8)  # changed before anything reads its edges
    unread.restore(original.saved(), keys)
    for lists in (original, restored, unread):
        lists.add(new, np.arange(600, dtype=np.int64), lambda r: vectors[r], keys)
        lists.remove(dead, alive, lambda r: vectors[r], keys)
    assert restored.lists.changed() and len(restored.lists) == len(original.lists)
    assert dict(restored.lists) == dict(original.lists)
    assert restored.incoming.listed() == original.incoming.listed()
    assert restored.edge_count() == original.edge_count()
    for got_saved, want_saved in zip(restored.saved().values(), original.saved().values()):
        assert np.array_equal(got_saved, want_saved) and got_saved.dtype == want_saved.dtype
    for got, want, other in zip(restored.edges(), original.edges(), unread.edges()):
        assert np.array_equal(got, want) and np.array_equal(other, want)
    assert [restored.list_of(int(r)) for r in alive] == [original.lists.get(int(r), []) for r in alive]
    pairs, cosines = original.edges()
    assert [restored.weight((a, b)) for a, b in pairs.tolist()] == cosines.tolist()
