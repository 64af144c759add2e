"""What `index` and `update` do with stored documents and the extractions given for them: an extraction keyed
by a document id is not copied into its chunks, nor taken by a document whose id looks like a chunk's; an
update applies a metadata-only change, reports what it did and leaves identical content unchanged; extractions
given later complete stored pending passages. (Found by review, issue 10, and an outside audit.)"""

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


def test_update_reports_what_it_did(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32), llm=False) as memory:
        memory.index([Document("lyon", "Lyon is a city.")])
        changed = memory.update(Document("lyon", "Lyon is a city on the Rhone."))
        assert (changed.added, changed.updated) == ([], ["lyon"])
        new = memory.update(Document("paris", "Paris is a city."))
        assert (new.added, new.updated) == (["paris"], [])
        same = memory.update(Document("paris", "Paris is a city."))
        assert (same.added, same.updated, same.unchanged) == ([], [], 1)


def test_extractions_given_later_complete_stored_pending_passages(tmp_path: Path) -> None:
    triples = {"id": "a", "triples": [["Kim", "met", "Lee"], ["Lee", "lives in", "Oslo"]]}
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32), llm=False) as memory:
        memory.index([Document("a", "Kim met Lee. Lee lives in Oslo."), Document("b", "Nothing given for b.")])
        assert memory.stats()["pending"] == 2
        report = memory.index([Document("a", "Kim met Lee. Lee lives in Oslo.")], extractions=[triples])
        assert (report.unchanged, report.imported) == (1, 1)
        assert memory.stats()["pending"] == 1 and memory.stats()["facts"] == 2
        assert sorted(memory.phrases_of("a")) == ["kim", "lee", "oslo"]
        again = memory.index([], extractions=[triples])  # nothing pending for it any more: nothing imported
        assert again.imported == 0
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32), llm=False) as memory:
        assert sorted(memory.phrases_of("a")) == ["kim", "lee", "oslo"] and memory.stats()["pending"] == 1


def test_a_document_whose_id_ends_in_a_chunk_number_takes_no_other_documents_triples(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32), llm=False) as memory:
        report = memory.index(
            [Document("report", "Kim met Lee in Oslo."), Document("report#1", "Kim met Lee again.")],
            extractions=[{"id": "report", "triples": [["Kim", "met", "Lee"]]}],
        )
        assert report.imported == 1 and memory.stats()["pending"] == 1  # report#1 is a document, not a chunk
        assert memory.phrases_of("report#1") == []
