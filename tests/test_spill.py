"""Issue 11: vector rows moved out of RAM into unnamed files after each commit (`Rows.spill`) change nothing a
memory does. Oracle: the continual-learning property (tests/test_continual.py) with every commit's rows moved,
against a fresh build that keeps them in RAM and against the independent batch builder's graph."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engram.index.state.rows
from engram import Memory
from engram.embed import HashEmbedder
from rooms import Rooms
from test_continual import CONFIG, Live, apply, matches_oracle, observe, operation, oracle_graph, same


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=6))
def test_spilling_every_commit_equals_a_build_in_ram(ops: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        live: Live = {}
        known: dict[tuple[Any, str], dict[str, Any]] = {}
        patch.setattr(engram.index.state.rows, "SPILL_ROWS", 1)
        with Rooms(Path(tmp) / "spilled", HashEmbedder(dim=64), CONFIG) as memory:
            for op in ops:
                apply(memory, live, op, known)
            state = memory.live.load()
            assert all(rows.tail_size == 0 for rows in state.vectors.values())  # every row was moved
            spilled = observe(memory)
        matches_oracle(spilled["graph"], oracle_graph(live, known, HashEmbedder(dim=64)))
        with Memory(Path(tmp) / "spilled", embedder=HashEmbedder(dim=64), config=CONFIG) as reopened:
            same(observe(reopened), spilled)  # the snapshot written from the files
        patch.setattr(engram.index.state.rows, "SPILL_ROWS", 1 << 40)
        with Rooms(Path(tmp) / "ram", HashEmbedder(dim=64), CONFIG) as fresh:
            extractions = [{**e, "id": d.id} for d, _ in live.values() if (e := known.get((d.title, d.text)))]
            fresh.index([d for d, _ in live.values()], extractions=extractions)
            assert not any(rows.spilled for rows in fresh.live.load().vectors.values())
            same(observe(fresh), spilled)
