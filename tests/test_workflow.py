"""Issue 10, defects 1, 4 and 5: the everyday workflow through the CLI (index, edit, index again, sync,
delete), what the commands print, and failed extractions made visible."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engram.cli import build_parser, main
from fake_openai import FakeOpenAI, openie_answer, task_of

HASH = ["--embedder", "hash"]


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([*argv, *HASH])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def retrieve_ids(capsys: pytest.CaptureFixture[str], mem: str, query: str) -> list[str]:
    code, out, _ = run(capsys, "retrieve", query, "--memory", mem, "--method", "bm25", "--json", "--top-k", "10")
    assert code == 0
    return [p["id"] for p in json.loads(out)["passages"]]


def stored_ids(capsys: pytest.CaptureFixture[str], mem: str) -> int:
    code, out, _ = run(capsys, "stats", "--memory", mem)
    assert code == 0
    return int(json.loads(out)["documents"])


def make_notes(root: Path) -> Path:
    notes = root / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("Alice keeps bees in Lyon.")
    (notes / "b.txt").write_text("Bob repairs bicycles in Oslo.")
    return notes


# defect 1 -----------------------------------------------------------------------------------------------
def test_readme_workflow_index_edit_index_sync_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes, mem = make_notes(tmp_path), str(tmp_path / "my.engram")
    code, _, err = run(capsys, "index", str(notes), "--memory", mem)
    assert code == 0 and "indexed 2 documents" in err

    (notes / "a.md").write_text("Alice keeps goats in Grenoble.")  # edit one file, add another
    (notes / "c.txt").write_text("Carol paints lighthouses in Brest.")
    code, out, err = run(capsys, "index", str(notes), "--memory", mem)
    assert code == 0, err
    assert "updated  notes/a.md" in out and "added    notes/c.txt" in out and "notes/b.txt" not in out
    assert "1 added, 1 updated, 1 unchanged" in err
    code, out, _ = run(capsys, "retrieve", "goats", "--memory", mem, "--method", "bm25", "--json", "--top-k", "3")
    texts = {p["id"]: p["text"] for p in json.loads(out)["passages"]}
    assert texts["notes/a.md"] == "Alice keeps goats in Grenoble." and "bees" not in str(texts)

    (notes / "b.txt").unlink()  # sync adopts what `index` brought from this folder and deletes what vanished
    code, out, err = run(capsys, "sync", str(notes), "--memory", mem)
    assert code == 0, err
    assert out.split() == ["deleted", "notes/b.txt"]
    assert "0 added, 0 updated, 1 deleted, 2 unchanged" in err

    code, out, err = run(capsys, "delete", "notes/c.txt", "--memory", mem)
    assert code == 0 and "deleted 1 documents" in err
    assert retrieve_ids(capsys, mem, "lighthouses Brest bicycles goats") == ["notes/a.md"]


def test_sync_first_then_index_is_consistent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes, mem = make_notes(tmp_path), str(tmp_path / "m")
    assert run(capsys, "sync", str(notes), "--memory", mem)[0] == 0
    code, out, err = run(capsys, "index", str(notes), "--memory", mem)
    assert code == 0 and out == "" and "2 unchanged" in err
    assert stored_ids(capsys, mem) == 2


def test_two_folders_with_the_same_file_name_do_not_collide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, text in (("work", "The work notes mention invoices."), ("home", "The home notes mention gardens.")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text(text)
    mem = str(tmp_path / "m")
    code, _, err = run(capsys, "index", str(tmp_path / "work"), str(tmp_path / "home"), "--memory", mem)
    assert code == 0, err
    assert retrieve_ids(capsys, mem, "invoices")[0] == "work/notes.txt"
    assert retrieve_ids(capsys, mem, "gardens")[0] == "home/notes.txt"
    # syncing one folder never touches the other's documents
    (tmp_path / "work" / "notes.txt").unlink()
    assert run(capsys, "sync", str(tmp_path / "home"), "--memory", mem)[1] == ""
    assert stored_ids(capsys, mem) == 2


def test_a_same_named_folder_elsewhere_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for parent in ("x", "y"):
        (tmp_path / parent / "notes").mkdir(parents=True)
        (tmp_path / parent / "notes" / "a.txt").write_text(f"Text from {parent}.")
    mem = str(tmp_path / "m")
    assert run(capsys, "index", str(tmp_path / "x" / "notes"), "--memory", mem)[0] == 0
    code, _, err = run(capsys, "index", str(tmp_path / "y" / "notes"), "--memory", mem)
    assert code == 1 and "notes/a.txt" in err and "rename" in err and "Traceback" not in err


# defect 4 -----------------------------------------------------------------------------------------------
def test_delete_and_extract_do_not_claim_to_index(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    notes, mem = make_notes(tmp_path), str(tmp_path / "m")
    run(capsys, "index", str(notes), "--memory", mem)
    fake_llm.handler = openie_answer
    code, _, err = run(capsys, "extract", "--memory", mem, "--llm-base-url", fake_llm.base_url, "--llm-model",
                       "fake-model")  # fmt: skip
    assert code == 0 and "indexed" not in err and "extracted 2 passages" in err
    code, _, err = run(capsys, "delete", "notes/a.md", "--memory", mem)
    assert code == 0 and "indexed" not in err and "deleted 1 documents" in err


def test_retrieve_says_why_it_fell_back_to_hybrid_scores(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    notes, mem = make_notes(tmp_path), str(tmp_path / "m")
    run(capsys, "index", str(notes), "--memory", mem)
    code, out, _ = run(capsys, "retrieve", "Who keeps bees?", "--memory", mem)
    assert code == 0 and "[hybrid: no facts yet, 2 passages pending extraction]" in out
    assert "ranked by: dense cosine + BM25 only (no facts yet, 2 passages pending extraction)" in out
    code, out, _ = run(capsys, "retrieve", "Who keeps bees?", "--memory", mem, "--json")
    assert json.loads(out)["fallback_reason"] == "no facts yet, 2 passages pending extraction"

    llm = ["--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model"]
    fake_llm.handler = openie_answer
    assert run(capsys, "extract", "--memory", mem, *llm)[0] == 0

    def filter_keeps_nothing(request: dict[str, Any]) -> str | None:
        return '{"facts": []}' if task_of(request) == "filter" else openie_answer(request)

    fake_llm.handler = filter_keeps_nothing
    code, out, _ = run(capsys, "retrieve", "Who keeps bees?", "--memory", mem, *llm)
    assert code == 0 and "[hybrid: no fact survived the recognition filter]" in out


def test_files_skipped_for_their_extension_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = make_notes(tmp_path)
    (notes / "paper.pdf").write_bytes(b"%PDF-1.4")
    (notes / "data.csv").write_text("a,b\n")
    code, _, err = run(capsys, "index", str(notes), "--memory", str(tmp_path / "m"))
    assert code == 0
    assert "paper.pdf" in err and "data.csv" in err and ".pdf" in err and "a.md" not in err.replace("notes/a", "")


def test_stats_into_a_closed_pipe_is_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes, mem = make_notes(tmp_path), str(tmp_path / "m")
    run(capsys, "index", str(notes), "--memory", mem)
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.cli", "stats", "--memory", mem, *HASH],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # like `| head -1` that has already exited
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err
    assert proc.returncode in (0, 141)


def test_every_command_has_a_description_examples_and_only_its_flags() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {name: p.format_help() for name, p in sub.choices.items()}
    for name in ("index", "extract", "delete", "sync", "retrieve", "ask", "stats", "eval", "report", "demo"):
        assert "examples:" in helps[name] and f"engram {name}" in helps[name], name
        assert len(sub.choices[name].description or "") > 40, name
    assert "--top-k" in helps["retrieve"] and "passages to return" in helps["retrieve"]
    for name in ("stats", "delete"):
        assert "--llm-model" not in helps[name] and "--progress" not in helps[name], name
    for name in ("index", "extract", "sync"):
        assert "--llm-model" in helps[name] and "--progress" in helps[name] and "--strict" in helps[name], name
    assert "--progress" not in helps["retrieve"]


# defect 5 -----------------------------------------------------------------------------------------------
def failing_on(word: str) -> Any:
    """Extraction answers, except an unreadable reply (asked again once, then a failed passage) for the
    passage that holds `word`."""

    def handle(request: dict[str, Any]) -> str | None:
        if word in json.dumps(request["messages"]):
            return "Sure! {entities: [Ada"
        return openie_answer(request)

    return handle


def test_failed_extractions_are_counted_explained_retried_and_strict(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    notes, mem = make_notes(tmp_path), str(tmp_path / "m")
    llm = ["--memory", mem, "--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model"]
    fake_llm.handler = failing_on("Bob")
    code, _, err = run(capsys, "index", str(notes), *llm)
    assert code == 0
    assert "1 passages failed extraction" in err and "1 x unreadable reply" in err
    code, _, err = run(capsys, "index", str(notes), *llm, "--strict")
    assert code == 3 and "1 passages failed extraction" in err
    code, _, err = run(capsys, "extract", *llm, "--strict")
    assert code == 3 and "1 passages failed extraction" in err

    fake_llm.handler = openie_answer  # the server is fixed: a sync with nothing to add retries the failure
    before = fake_llm.attempts
    code, _, err = run(capsys, "sync", str(notes), *llm, "--strict")
    assert code == 0, err
    assert fake_llm.attempts > before and "1 by the LLM, 0 failed" in err and "failed extraction" not in err
    assert run(capsys, "extract", *llm, "--strict")[0] == 0


def test_sync_reports_failures(tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    notes, mem = make_notes(tmp_path), str(tmp_path / "m")
    fake_llm.handler = failing_on("Alice")
    code, _, err = run(capsys, "sync", str(notes), "--memory", mem, "--llm-base-url", fake_llm.base_url,
                       "--llm-model", "fake-model", "--strict")  # fmt: skip
    assert code == 3 and "1 passages failed extraction" in err


def test_sync_renames_documents_of_the_old_id_scheme(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Memories synced before ids carried the folder name: a sync replaces `a.md` by `notes/a.md`."""
    from engram import Document, Memory
    from engram.embed import HashEmbedder

    notes, mem = make_notes(tmp_path), tmp_path / "m"
    old = {"sync_root": str(notes.resolve())}
    with Memory(mem, embedder=HashEmbedder()) as memory:
        memory.index([Document("a.md", "Alice keeps bees in Lyon.", "a", old)])
    code, out, _ = run(capsys, "sync", str(notes), "--memory", str(mem))
    assert code == 0 and out.split() == ["added", "notes/a.md", "added", "notes/b.txt", "deleted", "a.md"]
