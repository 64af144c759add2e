"""Readers are never held up by a write in progress: a retrieve runs while another thread's index() is in the
middle of embedding, sees the last committed generation, and the next retrieve after the commit sees the write."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram import Document, Memory
from engram.embed.base import Progress, Role, Vectors
from engram.embed.hashing import HashEmbedder


class GatedEmbedder:
    """A hash embedder whose phrase and fact embeddings (made inside the live index's change, before the commit)
    wait for `release` once `armed`: the writer stalls there."""

    def __init__(self) -> None:
        self.inner = HashEmbedder()
        self.armed = False
        self.inside = threading.Event()
        self.release = threading.Event()

    @property
    def identity(self) -> dict[str, Any]:
        return self.inner.identity

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        if self.armed and role in ("phrase", "fact"):
            self.inside.set()
            assert self.release.wait(60), "the test never released the writer"
        return self.inner.embed(texts, role=role, progress=progress)


def test_a_reader_is_served_while_a_writer_embeds(tmp_path: Path) -> None:
    embedder = GatedEmbedder()
    with Memory(tmp_path / "m", embedder=embedder, llm=False) as memory:
        memory.index([Document("a", "Alice Moreau founded Acme in 1998.")])
        assert [p.id for p in memory.retrieve("Who founded Acme?", method="dense")[0].passages] == ["a"]
        embedder.armed = True
        extraction = [{"id": "b", "entities": ["Bob Stein"], "triples": [["Bob Stein", "lives in", "Lyon"]]}]
        writer = threading.Thread(
            target=memory.index, args=([Document("b", "Bob Stein lives in Lyon.")],), kwargs={"extractions": extraction}
        )
        writer.start()
        assert embedder.inside.wait(30)  # the writer holds its change open, inside the embedding
        seen: list[list[str]] = []

        def read() -> None:
            seen.append([p.id for p in memory.retrieve("Who lives in Lyon?", top_k=5)[0].passages])

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(30)
        finished_during_write = not reader.is_alive()
        embedder.release.set()
        writer.join(60)
        reader.join(60)
        assert finished_during_write  # before the fix, the reader waited for the writer's lock
        assert seen == [["a"]]  # the last committed generation: nothing of the write in progress
        assert [p.id for p in memory.retrieve("Who lives in Lyon?", top_k=5)[0].passages] == ["b", "a"]
