from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest

from engram import Document, EmbedderMismatchError, InputError, LLMError, Memory, MemoryConfig, MemoryFormatError
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


def test_one_string_is_one_document_and_one_id(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32), llm=False) as memory:
        memory.index([Document(i, f"text number {i}") for i in ("1", "2", "12")])
        assert memory.delete("12").documents == 1  # not "1" and "2", the characters of "12"
        assert sorted(memory.documents()) == ["1", "2"]
        assert memory.index("Paris is the capital of France.").documents == 1  # not one document a letter
        assert memory.index(Document("d", "One document by itself.")).documents == 1
        assert len(memory.documents()) == 4
        with pytest.raises(InputError, match="decode"):
            memory.index(b"bytes are not text")  # type: ignore[arg-type]
        pending = memory.estimate().passages  # the stored passages an LLM would extract first
        assert memory.estimate("A new text, not yet stored.").passages == pending + 1  # not one a character


def test_library_arguments_of_the_wrong_kind_are_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32), llm=False) as memory:
        memory.index([Document("a", "Alice founded Acme in Lyon.")], extractions=[
            {"id": "a", "triples": [["Alice", "founded", "Acme"], ["Acme", "is based in", "Lyon"]]}
        ])
        wrong = {
            "a dict is not a list of documents": lambda: memory.index({"acme": "Alice founded Acme."}),
            "cannot index a NoneType": lambda: memory.index(None),  # type: ignore[arg-type]
            "queries are a str or a list": lambda: memory.retrieve({"q1": "Where?"}),  # type: ignore[arg-type]
            "top_k must be a whole number": lambda: memory.retrieve("Where?", top_k=2.5),  # type: ignore[arg-type]
            "not True": lambda: memory.retrieve("Where?", top_k=True),
            "document ids are strings": lambda: memory.delete([5]),  # type: ignore[list-item]
            "update takes one engram.Document": lambda: memory.update("new text"),  # type: ignore[arg-type]
            "text must be str": lambda: memory.update(Document("a", None)),  # type: ignore[arg-type]
            "must be a list of entity names": lambda: memory.retrieve(
                "Who founded Acme?", method="hipporag1", query_entities={"Who founded Acme?": "Alice"}  # type: ignore[dict-item]
            ),
        }
        for message, call in wrong.items():
            with pytest.raises(InputError, match=message):
                call()
        assert memory.retrieve("Who founded Acme?", top_k=np.int64(1), method="dense")[0].passages[0].id == "a"
        assert sorted(memory.documents()) == ["a"]  # nothing was written by a refused call
    for kwargs, message in (
        ({"embedder": 5}, "embedder takes"),
        ({"llm": True}, "llm takes a chat model"),
        ({"config": {"retrieve": {"damping": 1}}}, "damping must be a number in"),
        ({"config": "fast"}, "config takes"),
    ):
        with pytest.raises(InputError, match=message):
            Memory(tmp_path / "other", **{"embedder": HashEmbedder(dim=32), "llm": False, **kwargs})  # type: ignore[arg-type]
    with pytest.raises(InputError, match="path is a directory"):
        Memory(None)  # type: ignore[arg-type]
    config = {"retrieve": {"damping": 0.6}}
    with Memory(tmp_path / "dict", embedder=HashEmbedder(dim=32), llm=False, config=config) as memory:
        assert memory.config.retrieve.damping == 0.6  # a dict shaped like config.json is read as one


def test_settings_out_of_range_are_refused_with_the_range() -> None:
    cases = {
        "damping must be a number in [0, 1), not 1": {"damping": 1},
        "fact_top_k must be a whole number at least 1, not 0": {"fact_top_k": 0},
        "seed_fact_top_k must be a whole number at least 1, not 0": {"seed_fact_top_k": 0},
        "passage_weight must be a number at least 0, not -1": {"passage_weight": -1},
        "prior_temperature must be a number above 0, not 0": {"prior_temperature": 0},
        "use_filter must be true or false": {"use_filter": 1},
        "damping must be a number in [0, 1), not '0.5'": {"damping": "0.5"},
    }
    for message, values in cases.items():
        with pytest.raises(InputError) as caught:
            MemoryConfig.from_dict({"retrieve": values})
        assert message in str(caught.value)
    with pytest.raises(InputError, match="synonym_threshold"):
        MemoryConfig.from_dict({"graph": {"synonym_threshold": 2}})
    with pytest.raises(InputError, match="keep_vector_cache must be true or false, not 'yes'"):
        MemoryConfig.from_dict({"graph": {"keep_vector_cache": "yes"}})
    with pytest.raises(InputError, match="max_words"):
        MemoryConfig.from_dict({"chunk": {"max_words": 0}})
    kept = MemoryConfig.from_dict({"retrieve": {"fact_temperature": None, "passage_weight": 0, "damping": 0}})
    assert kept.retrieve.fact_temperature is None and kept.retrieve.damping == 0


def test_a_closed_memory_says_so(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m", embedder=HashEmbedder(dim=32), llm=False)
    memory.index([Document("a", "Alice founded Acme.")])
    memory.close()
    for call in (
        lambda: memory.retrieve("Who?"),
        lambda: memory.stats(),
        lambda: memory.index("More text."),
        lambda: memory.documents(),
        lambda: memory.delete("a"),
    ):
        with pytest.raises(InputError, match="is closed: open it again"):
            call()
    memory.close()  # closing twice is harmless
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=32), llm=False) as again:
        assert sorted(again.documents()) == ["a"]
