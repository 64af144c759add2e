"""Defects a first-time user met (an outside audit of the CLI and library): each used to lose data, give a
wrong number without a word, or end in a traceback; each test fails on the code before the fix."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from engram import Document, EmbedderMismatchError, InputError, Memory, MemoryConfig
from engram.cli import main
from engram.embed import HashEmbedder
from helpers import cli_refused

HASH = ["--embedder", "hash:64"]


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER", "ENGRAM_EXTRACTOR"):
        monkeypatch.delenv(name, raising=False)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    return cli_refused(capsys, list(argv))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


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


def test_two_files_of_one_name_never_overwrite_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write(tmp_path / "p1" / "README.md", "Rust is the language of this project.")
    second = write(tmp_path / "p2" / "README.md", "This project is written in Go.")
    mem = str(tmp_path / "m")
    assert main(["index", str(first), "-m", mem, *HASH]) == 0
    message = refused(capsys, "index", str(second), "-m", mem)
    assert str(first) in message and "engram delete README.md" in message
    with Memory(mem, llm=False) as memory:
        assert memory.documents()["README.md"]["path"] == str(first)
        top = memory.retrieve("Which language?", top_k=1, method="dense")[0].passages[0]
        assert top.text == first.read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path / "p1")  # the same file, typed another way: unchanged, not refused
    assert main(["index", "README.md", "-m", mem]) == 0
    assert "1 unchanged" in capsys.readouterr().err
    assert main(["delete", "README.md", "-m", mem]) == 0  # what the message says to do works
    assert main(["index", str(second), "-m", mem]) == 0


def test_a_folder_typed_three_ways_is_the_same_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "notes" / "a.md", "Alpha lives here.")
    write(tmp_path / "notes" / "b.md", "Beta lives there.")
    mem = str(tmp_path / "m")
    monkeypatch.chdir(tmp_path)
    assert main(["index", "notes", "-m", mem, *HASH]) == 0
    capsys.readouterr()
    monkeypatch.chdir(tmp_path / "notes")
    for typed in (str(tmp_path / "notes"), "../notes/", "."):
        assert main(["index", typed, "-m", mem]) == 0
        assert "(0 added, 0 updated, 2 unchanged" in capsys.readouterr().err, typed


def test_a_memory_opens_with_the_embedder_it_was_written_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "notes" / "a.md", "Alpha lives here.")
    mem = str(tmp_path / "m")
    assert main(["index", str(tmp_path / "notes"), "-m", mem, *HASH]) == 0
    capsys.readouterr()
    assert main(["stats", "-m", mem]) == 0  # no --embedder to repeat
    assert json.loads(capsys.readouterr().out)["documents"] == 1
    with Memory(mem, llm=False) as memory:
        assert memory.embedder.identity == {"kind": "hash", "dim": 64}
    assert "same embedder" in refused(capsys, "stats", "-m", mem, "--embedder", "hash:32")
    with pytest.raises(EmbedderMismatchError):
        Memory(mem, embedder=HashEmbedder(dim=16), llm=False)


def test_eval_refuses_what_would_report_a_wrong_recall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"id": "d1", "title": "A", "text": "Alpha is here."}, {"id": "d2", "title": "B", "text": "Beta."}]
    corpus = str(write(tmp_path / "c.jsonl", "".join(json.dumps(r) + "\n" for r in rows)))
    question = {"id": "q1", "question": "Where is alpha?", "answers": ["here"]}

    def questions(name: str, **extra: object) -> str:
        return str(write(tmp_path / name, json.dumps({**question, **extra}) + "\n"))

    mem = tmp_path / "m"
    run = ["eval", "--corpus", corpus, "--memory", str(mem), *HASH, "--methods", "dense,bm25"]
    no_gold = questions("no_gold.jsonl", supporting=["d1"])
    assert "no question has gold passages" in refused(capsys, *run, "--questions", no_gold)
    typo = questions("typo.jsonl", gold=["d9"])
    assert "'d9' (question q1)" in refused(capsys, *run, "--questions", typo)
    good = questions("good.jsonl", gold=["d1"])
    assert "--baseline hipporag2" in refused(capsys, *run, "--questions", good, "--baseline", "hipporag2")
    assert "--limit" in refused(capsys, *run, "--questions", good, "--limit", "-1")
    assert "is a file" in refused(capsys, *run, "--questions", good, "--out", corpus)
    assert "names no method" in refused(capsys, *[a if a != "dense,bm25" else "," for a in run], "--questions", good)
    assert not mem.exists()  # every refusal came before any indexing
    assert main([*run, "--questions", good, "--baseline", "bm25", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {c["b"] for c in result["comparisons"]} == {"bm25"}


def test_delete_of_an_unknown_id_says_so_once_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "notes" / "a.md", "Alpha lives here.")
    mem = str(tmp_path / "m")
    assert main(["index", str(tmp_path / "notes"), "-m", mem, *HASH]) == 0
    capsys.readouterr()
    assert main(["delete", "zzz", "notes/a.md", "-m", mem]) == 1
    err = capsys.readouterr().err
    assert err.count("skipped zzz: not in the memory") == 1
    assert "deleted 1 documents" in err


def test_paths_and_numbers_that_cannot_work_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "notes" / "a.md", "Alpha lives here.")
    afile = write(tmp_path / "afile", "not a memory")
    mem = str(tmp_path / "m")
    assert "afile is a file" in refused(capsys, "index", str(tmp_path / "notes"), "-m", f"{afile}/sub", *HASH)
    assert main(["index", str(tmp_path / "notes"), "-m", mem, *HASH]) == 0
    assert "no raptor index" in refused(capsys, "method-costs", "raptor", "-m", mem)
    if importlib.util.find_spec("uvicorn") is not None:
        assert "--port 99999" in refused(capsys, "serve", "-m", mem, "--port", "99999")
        assert "is a file" in refused(capsys, "serve", "-m", str(afile))
        assert "--threads" in refused(capsys, "serve", "-m", mem, "--threads", "0")
    assert "--limit" in refused(capsys, "retrieve", "alpha", "-m", mem, "--limit", "0")
    assert "add --segments" in refused(capsys, "retrieve", "alpha", "-m", mem, "--budget-tokens", "100")
    assert main(["retrieve", "alpha", "-m", mem, "--segments", "--method", "dense", "--budget-tokens", "100"]) == 0
    pdf = tmp_path / "paper.pdf"
    pdf.write_bytes(b"%PDF-1.4\x00binary")
    assert "nothing to index" in refused(capsys, "index", str(pdf), "-m", mem)


@pytest.mark.skipif(importlib.util.find_spec("spacy") is None, reason="needs the nlp extra")
def test_sync_takes_the_extractor_and_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "notes" / "a.md", "Marie Curie was born in Warsaw. She worked in Paris.")
    mem = str(tmp_path / "m")
    assert main(["sync", str(tmp_path / "notes"), "-m", mem, *HASH, "--extractor", "spacy"]) == 0
    err = capsys.readouterr().err
    assert "extractions: 1 by spaCy (offline), 0 failed" in err
    with Memory(mem, llm=False) as memory:
        assert memory.stats()["facts"] > 0 and memory.stats()["pending"] == 0


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
