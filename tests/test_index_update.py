"""Defects found by review (issue 10, items 12 and 13), each pinned by a test that failed before its fix."""

from __future__ import annotations

from pathlib import Path

from engram import Document, Memory, MemoryConfig
from engram.embed.hashing import HashEmbedder
from engram.text import ChunkConfig

LONG = " ".join(f"word{i}" for i in range(50))


def test_an_extraction_keyed_by_document_id_is_not_copied_into_every_chunk(tmp_path: Path) -> None:
    config = MemoryConfig(chunk=ChunkConfig(max_words=20, overlap=0))
    extraction = {"id": "long", "entities": ["Alpha", "Beta"], "triples": [["Alpha", "knows", "Beta"]]}
    short = {"id": "short", "entities": ["Gamma"], "triples": [["Gamma", "meets", "Delta"]]}
    with Memory(tmp_path / "m", embedder=HashEmbedder(), config=config) as memory:
        report = memory.index(
            [Document("long", LONG), Document("short", "Gamma meets Delta.")], extractions=[extraction, short]
        )
        chunks = [f"long#{i}" for i in range(3)]
        assert report.passages == 4
        # one-chunk documents still take the extraction keyed by their id
        assert sorted(memory.phrases_of("short")) == ["delta", "gamma"]
        # a chunk holds a third of the document: it must not claim the whole document's triples
        assert all(memory.phrases_of(c) == [] for c in chunks)
        assert report.pending == 3


def test_update_applies_a_metadata_only_change(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index([Document("a", "Alice founded Acme.", "Acme", {"tag": "old"})])
        report = memory.update(Document("a", "Alice founded Acme.", "Acme", {"tag": "new"}))
        assert report.unchanged == 0 and report.documents == 1
        assert memory.documents()["a"] == {"tag": "new"}
        hit = memory.retrieve("Who founded Acme?", top_k=1, method="dense")[0].passages[0]
        assert hit.metadata == {"tag": "new"}
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:  # and it was committed
        assert memory.documents()["a"] == {"tag": "new"}
        assert memory.retrieve("Who founded Acme?", top_k=1, method="dense")[0].passages[0].metadata == {"tag": "new"}


def test_update_with_identical_content_and_metadata_is_unchanged(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index([Document("a", "Alice founded Acme.", "Acme", {"tag": "x"})])
        generation = memory.stats()["generation"]
        assert memory.update(Document("a", "Alice founded Acme.", "Acme", {"tag": "x"})).unchanged == 1
        assert memory.stats()["generation"] == generation
