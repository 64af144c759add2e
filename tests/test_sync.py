"""`engram sync` and `engram delete` on a temporary folder: add, modify, rename and delete."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from engram import Document, Memory
from engram.cli import main
from engram.embed import HashEmbedder

HASH = ["--embedder", "hash:64"]


@pytest.fixture()
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER", "ENGRAM_EXTRACTOR"):
        monkeypatch.delenv(name, raising=False)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def retrieve_ids(mem: str, query: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["retrieve", query, "--memory", mem, "--embedder", "hash", "--method", "bm25", "--json",
                 "--top-k", "10"]) == 0
    return [p["id"] for p in json.loads(capsys.readouterr().out)["passages"]]


def sync(folder: Path, mem: str, capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    assert main(["sync", str(folder), "--memory", mem, "--embedder", "hash"]) == 0
    out: dict[str, list[str]] = {"added": [], "updated": [], "deleted": []}
    for line in capsys.readouterr().out.splitlines():
        label, doc_id = line.split(maxsplit=1)
        out[label].append(doc_id)
    return out


def test_sync_add_modify_rename_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text("Apples grow in the orchard.")
    (docs / "sub" / "b.md").write_text("Bees make honey in the hive.")
    mem = str(tmp_path / "m")
    assert sync(docs, mem, capsys) == {"added": ["docs/a.txt", "docs/sub/b.md"], "updated": [], "deleted": []}
    assert sync(docs, mem, capsys) == {"added": [], "updated": [], "deleted": []}  # nothing changed

    (docs / "a.txt").write_text("Apricots grow in the orchard.")
    assert sync(docs, mem, capsys)["updated"] == ["docs/a.txt"]
    assert retrieve_ids(mem, "apricots", capsys)[0] == "docs/a.txt"

    (docs / "sub" / "b.md").rename(docs / "c.md")
    assert sync(docs, mem, capsys) == {"added": ["docs/c.md"], "updated": [], "deleted": ["docs/sub/b.md"]}
    assert set(retrieve_ids(mem, "honey bees", capsys)) == {"docs/a.txt", "docs/c.md"}

    (docs / "a.txt").unlink()
    assert sync(docs, mem, capsys)["deleted"] == ["docs/a.txt"]
    assert retrieve_ids(mem, "orchard", capsys) == ["docs/c.md"]
    with Memory(mem, embedder=HashEmbedder()) as memory:
        assert set(memory.documents()) == {"docs/c.md"}


def test_sync_leaves_other_documents_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mem = tmp_path / "m"
    with Memory(mem, embedder=HashEmbedder()) as memory:
        memory.index([Document("manual", "Indexed by hand about comets.")])
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.txt").write_text("Synced text about planets.")
    sync(docs, str(mem), capsys)
    (docs / "x.txt").unlink()
    assert sync(docs, str(mem), capsys)["deleted"] == ["docs/x.txt"]
    with Memory(mem, embedder=HashEmbedder()) as memory:
        assert set(memory.documents()) == {"manual"}


def test_delete_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mem = tmp_path / "m"
    with Memory(mem, embedder=HashEmbedder()) as memory:
        memory.index([Document("one", "First note about owls."), Document("two", "Second note about owls.")])
    assert main(["delete", "one", "ghost", "--memory", str(mem), "--embedder", "hash"]) == 1  # as rm: ghost is unknown
    err = capsys.readouterr().err
    assert "skipped ghost" in err and "deleted 1 documents" in err
    assert retrieve_ids(str(mem), "owls", capsys) == ["two"]


@pytest.mark.skipif(importlib.util.find_spec("spacy") is None, reason="needs the nlp extra")
@pytest.mark.usefixtures("no_env")
def test_sync_takes_the_extractor_and_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "notes" / "a.md", "Marie Curie was born in Warsaw. She worked in Paris.")
    mem = str(tmp_path / "m")
    assert main(["sync", str(tmp_path / "notes"), "-m", mem, *HASH, "--extractor", "spacy"]) == 0
    err = capsys.readouterr().err
    assert "extractions: 1 by spaCy (offline), 0 failed" in err
    with Memory(mem, llm=False) as memory:
        assert memory.stats()["facts"] > 0 and memory.stats()["pending"] == 0


@pytest.mark.usefixtures("no_env")
def test_sync_keeps_a_document_whose_file_is_there_but_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "notes" / "a.md", "Alpha lives here.")
    write(tmp_path / "notes" / "b.md", "Beta lives there.")
    mem = str(tmp_path / "m")
    assert main(["sync", str(tmp_path / "notes"), "-m", mem, *HASH]) == 0
    (tmp_path / "notes" / "b.md").write_bytes(b"\xff\xfe\x00 half-written")
    capsys.readouterr()
    assert main(["sync", str(tmp_path / "notes"), "-m", mem]) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and "0 deleted" in err
    with Memory(mem, llm=False) as memory:
        assert sorted(memory.documents()) == ["notes/a.md", "notes/b.md"]
    (tmp_path / "notes" / "b.md").unlink()  # a file that is gone is still deleted
    assert main(["sync", str(tmp_path / "notes"), "-m", mem]) == 0
    assert "1 deleted" in capsys.readouterr().err
