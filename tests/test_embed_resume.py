"""Issue 10, defect 2: embeddings are saved batch by batch, so an interrupted embed keeps its finished batches
and a re-run embeds only the rest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engram import Document, Memory
from engram.embed import HashEmbedder
from engram.embed.base import Progress, Role, Vectors
from engram.index.live.load import EMBED_BATCH


class CountingEmbedder:
    """HashEmbedder that counts the texts it embeds and raises KeyboardInterrupt on call `interrupt_at`."""

    def __init__(self, interrupt_at: int | None = None) -> None:
        self.inner = HashEmbedder()
        self.interrupt_at = interrupt_at
        self.calls = 0
        self.texts = 0

    @property
    def identity(self) -> dict[str, Any]:
        return self.inner.identity

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        self.calls += 1
        if self.interrupt_at is not None and self.calls >= self.interrupt_at:
            raise KeyboardInterrupt
        self.texts += len(texts)
        return self.inner.embed(texts, role, progress)


def test_interrupted_embedding_keeps_finished_batches(tmp_path: Path) -> None:
    count = EMBED_BATCH * 2 + 7
    docs = [Document(f"d{i}", f"Document number {i} talks about topic {i * 7919 % 1009}.") for i in range(count)]
    first = CountingEmbedder(interrupt_at=3)  # two batches finish, the third is interrupted
    with Memory(tmp_path / "m", embedder=first) as memory, pytest.raises(KeyboardInterrupt):
        memory.index(docs)
    assert first.texts == 2 * EMBED_BATCH
    second = CountingEmbedder()
    with Memory(tmp_path / "m", embedder=second) as memory:
        report = memory.index(docs)
        assert report.passages == count
        assert second.texts == count - 2 * EMBED_BATCH  # only what the interrupted run had not finished
        resumed = memory.retrieve("number 5 topic 274", top_k=5, method="dense")[0].passages
    with Memory(tmp_path / "fresh", embedder=HashEmbedder()) as fresh:
        fresh.index(docs)
        expected = fresh.retrieve("number 5 topic 274", top_k=5, method="dense")[0].passages
    assert [(h.id, h.score) for h in resumed] == [(h.id, h.score) for h in expected]
