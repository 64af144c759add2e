"""What the CLI makes of the paths, ids, numbers and embedders it is given: two files of one name never
overwrite each other, a folder typed several ways is one folder, a memory reopens with the embedder it was
written with, an unknown id is reported once, and arguments that cannot work are refused (before anything is
written) with a message naming the fix. (Found by an outside audit: each test failed on the code before.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from engram import EmbedderMismatchError, Memory
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
