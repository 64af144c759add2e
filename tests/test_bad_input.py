from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from engram import Document, EmbedderMismatchError, InputError, LLMError, Memory, MemoryFormatError
from engram.embed import HashEmbedder
from engram.llm import OpenAIChat
from helpers import DOCS, EXTRACTIONS


def test_empty_documents_are_skipped_and_reported(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        report = memory.index([Document("e", "   \n "), Document("ok", "Some text.")])
        assert report.skipped == {"e": "empty"}
        assert memory.stats()["passages"] == 1


def test_duplicate_ids_in_one_batch_are_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        with pytest.raises(InputError, match="appears twice"):
            memory.index([Document("d", "one"), Document("d", "two")])
        assert memory.stats()["passages"] == 0


def test_changed_document_under_same_id_is_updated(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index([Document("d", "one")])
        report = memory.index([Document("d", "two"), Document("e", "three")])
        assert report.updated == ["d"] and report.added == ["e"]
        assert [p.text for p in memory.retrieve("two", method="bm25", top_k=5)[0].passages if p.id == "d"] == ["two"]
        assert memory.stats()["passages"] == 2


def test_binary_documents_are_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        with pytest.raises(InputError, match="decode bytes"):
            memory.index([b"\x89PNG\r\n"])  # type: ignore[list-item]
        with pytest.raises(InputError, match="binary"):
            memory.index([Document("bin", "abc\x00def")])
        with pytest.raises(InputError, match="non-empty strings"):
            memory.retrieve("")


def test_five_megabyte_document_is_chunked(tmp_path: Path) -> None:
    sentence = "The quick brown fox number {} jumps over the lazy dog near river {}. "
    text = "".join(sentence.format(i, i % 97) for i in range(75_000))
    assert len(text.encode()) > 5_000_000
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        report = memory.index([Document("big", text)])
        assert report.passages > 1000
        hits = memory.retrieve("fox number 74999", top_k=3, method="bm25")[0].passages
        assert hits[0].id.startswith("big#")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_llm_fails_clearly_and_leaves_memory_usable(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    llm = OpenAIChat(model="m", base_url=url, timeout=1.0, max_retries=1, backoff_base=0.01, max_backoff=0.01)
    with (
        Memory(tmp_path / "m", embedder=HashEmbedder(), llm=llm) as memory,
        pytest.raises(LLMError, match=r"127\.0\.0\.1"),
    ):
        memory.index(DOCS)
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        assert memory.stats()["passages"] == 0
        memory.index(DOCS, extractions=EXTRACTIONS)
        assert memory.stats()["facts"] == 8


def test_other_embedder_is_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64)) as memory:
        memory.index(DOCS)
    with pytest.raises(EmbedderMismatchError, match="same embedder"):
        Memory(tmp_path / "m", embedder=HashEmbedder(dim=128))
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64)) as memory:
        assert memory.stats()["passages"] == 5


def test_leftover_temporary_manifest_does_not_block_creation(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / ".manifest.json.abc123").write_text("{")  # a creation killed before its rename
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        memory.index(DOCS)
        assert memory.stats()["passages"] == 5


def test_foreign_or_newer_directories_are_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("hello")
    with pytest.raises(MemoryFormatError, match="no engram manifest"):
        Memory(foreign, embedder=HashEmbedder())
    with Memory(tmp_path / "m", embedder=HashEmbedder()):
        pass
    manifest = tmp_path / "m" / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "version": 99}))
    with pytest.raises(MemoryFormatError, match="upgrade engram"):
        Memory(tmp_path / "m", embedder=HashEmbedder())
    manifest.write_text("{torn")
    with pytest.raises(MemoryFormatError):
        Memory(tmp_path / "m", embedder=HashEmbedder())
