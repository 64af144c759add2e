"""`engram index --extractor spacy` / `Memory(extractor="spacy")`: a graph without an LLM."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from engram import Memory
from engram.cli import main
from engram.embed import HashEmbedder
from engram.errors import InputError, MissingDependencyError
from engram.extract.offline import load_model, resolve_extractor
from engram.store.records import RecordStore
from engram.store.rows import ExtractionRow
from fake_openai import FakeOpenAI, openie_handler

pytest.importorskip("spacy", reason="the nlp extra (spaCy) is not installed")


def extraction_sources(path: Path) -> set[str]:
    """Who made the stored extractions of the memory at `path`, read from its records as another program would."""
    with closing(sqlite3.connect(path / "engram.sqlite")) as db:
        return {str(row[0]) for row in db.execute("SELECT DISTINCT source FROM extractions")}


def stored_extractions(path: Path) -> dict[str, ExtractionRow]:
    """The extraction rows of the memory at `path`, by content hash (its records opened on their own)."""
    store = RecordStore(path / "engram.sqlite")
    try:
        return store.extractions()
    finally:
        store.close()


DOCS = [
    "Alice Moreau founded Acme Tools in 1990. She was born in Lyon.",
    "Acme Tools is based in Grenoble. It makes hammers.",
    "Lyon is a city in France.",
]


@pytest.fixture(scope="module", autouse=True)
def _model() -> None:
    try:
        load_model()
    except MissingDependencyError:
        pytest.skip("the en_core_web_sm model is not installed")


def test_memory_builds_a_graph_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_EXTRACTOR", raising=False)
    with Memory(tmp_path / "pending", embedder=HashEmbedder(), llm=False) as memory:
        assert memory.index(DOCS).pending == 3  # no LLM and the default extractor: nothing extracted
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False, extractor="spacy") as memory:
        report = memory.index(DOCS)
        assert report.pending == 0 and report.extracted == 3
        stats = memory.stats()
        assert stats["facts"] > 0 and stats["phrases"] > 0
        result = memory.retrieve("Where was the founder of Acme Tools born?", top_k=3)[0]
    sources = extraction_sources(tmp_path / "m")
    assert result.method == "hipporag2" and result.seeds
    assert "acme tools" in {s.phrase for s in result.seeds}
    assert len(sources) == 1 and sources.pop().startswith("offline:spacy/")  # an LLM can later replace these


def test_the_environment_chooses_the_extractor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_EXTRACTOR", "spacy")
    assert resolve_extractor(None) == "spacy" and resolve_extractor("llm") == "llm"
    monkeypatch.setenv("ENGRAM_EXTRACTOR", "nope")
    with pytest.raises(InputError, match="llm, spacy"):
        resolve_extractor(None)


def test_cli_index_with_the_offline_extractor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, text in enumerate(DOCS):
        (folder / f"d{i}.txt").write_text(text, encoding="utf-8")
    memory = str(tmp_path / "m")
    assert main(["index", str(folder), "--memory", memory, "--embedder", "hash", "--extractor", "spacy"]) == 0
    err = capsys.readouterr().err
    assert "3 new passages" in err and "0 imported, 3 extracted, 0 failed" in err
    with Memory(memory, embedder=HashEmbedder(), llm=False) as opened:
        assert opened.stats()["pending"] == 0 and opened.stats()["facts"] > 0


def test_an_llm_later_replaces_the_offline_extractions(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.handler = openie_handler()
    path = tmp_path / "m"
    with Memory(path, embedder=HashEmbedder(), llm=False, extractor="spacy") as memory:
        memory.index(DOCS)
    offline = stored_extractions(path)
    with Memory(path, embedder=HashEmbedder(), llm=fake_llm.chat()) as memory:
        assert memory.extract().extracted == 0  # offline extractions are finished ones: nothing pending
        report = memory.extract(redo="other")  # passage by passage, through the LLM
    sources, replaced = extraction_sources(path), stored_extractions(path)
    assert report.extracted == len(DOCS) and report.failed == 0
    assert len(sources) == 1 and not sources.pop().startswith("offline:")
    assert {h: r.triples for h, r in replaced.items()} != {h: r.triples for h, r in offline.items()}
