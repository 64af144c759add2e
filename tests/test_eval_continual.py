"""`engram eval --continual N`: the split into segments with their questions, and the staged run on a tiny corpus."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from engram import Document, Memory
from engram.cli import main
from engram.embed import HashEmbedder
from engram.errors import InputError
from engram.eval.continual import arrival_order, split_segments
from engram.eval.data import Question, load_corpus, load_questions
from engram.eval.runner import MethodSpec, RunOptions, run_method

DATA = Path(str(resources.files("engram") / "data"))
CORPUS, QUESTIONS, EXTRACTIONS = (DATA / f"demo_{n}.jsonl" for n in ("corpus", "questions", "extractions"))


def docs(n: int) -> list[Document]:
    return [Document(f"d{i}", f"text {i}") for i in range(n)]


def test_split_keeps_gold_with_its_question_and_balances() -> None:
    questions = [
        Question("q0", "a", gold=["d3", "d7"]),
        Question("q1", "b", gold=["d7", "d8"]),  # shares d7 with q0: same segment
        Question("q2", "c", gold=["d1"]),
        Question("q3", "d", gold=["d9", "missing"]),
        Question("q4", "e", gold=[]),
    ]
    segments = split_segments(docs(12), questions, 3)
    assert sorted(d.id for s in segments for d in s.documents) == sorted(d.id for d in docs(12))
    assert [len(s.documents) for s in segments] == [4, 4, 4]
    assert [[q.id for q in s.questions] for s in segments] == [["q0", "q1"], ["q2", "q4"], ["q3"]]
    for segment in segments:
        held = {d.id for d in segment.documents}
        assert all(g in held for q in segment.questions for g in q.gold if g != "missing")
    assert split_segments(docs(12), questions, 3) == segments  # deterministic


def test_split_and_order_reject_bad_counts() -> None:
    with pytest.raises(InputError):
        split_segments(docs(3), [], 0)
    with pytest.raises(InputError):
        split_segments(docs(3), [], 4)
    assert arrival_order(4, 2) == [2, 0, 1, 3]
    with pytest.raises(InputError):
        arrival_order(4, 4)


def run_cli(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    args = ["eval", "--questions", str(QUESTIONS), "--corpus", str(CORPUS), "--extractions", str(EXTRACTIONS)]
    code = main([*args, "--embedder", "hash", "--bootstrap-samples", "200", "--no-progress", *extra])
    return code, capsys.readouterr().out


def test_continual_eval_last_stage_equals_a_fresh_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(capsys, "--continual", "2", "--methods", "bm25", "--json", "--out", str(tmp_path / "run"))
    assert code == 0
    result = json.loads(out)
    assert result["setup"]["continual"] == 2 and result["evaluated_segment"] == 1
    assert [s["segments"] for s in result["stages"]] == [[1], [1, 2]]
    assert [s["index"]["documents"] for s in result["stages"]] == [6, 12]
    assert list(result["stages"][0]["methods"]) == ["hipporag2", "dense", "bm25"]
    assert (tmp_path / "run" / "continual.json").exists() and (tmp_path / "run" / "details.jsonl").exists()
    # the final stage saw the whole corpus, incrementally: it scores like a memory built at once
    corpus, questions = load_corpus(CORPUS), load_questions(QUESTIONS)
    evaluated = split_segments(corpus, questions, 2)[0].questions
    with Memory(tmp_path / "fresh", embedder=HashEmbedder()) as memory:
        memory.index(corpus, extractions=EXTRACTIONS)
        for method in ("hipporag2", "dense", "bm25"):
            fresh = run_method(memory, evaluated, MethodSpec(method, method), RunOptions()).summary
            assert result["stages"][-1]["methods"][method]["recall"] == fresh["recall"]


def test_continual_eval_table_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(capsys, "--continual", "2", "--eval-segment", "2", "--methods", "dense")
    assert code == 0
    assert "evaluating segment 2" in out and "| 2 | 2+1 |" in out and "hipporag2 R@5" in out
    assert run_cli(capsys, "--continual", "0")[0] == 1
    assert run_cli(capsys, "--continual", "2", "--eval-segment", "3")[0] == 1
    assert run_cli(capsys, "--continual", "2", "--eval-segment", "0")[0] == 1
    memory = tmp_path / "used"
    with Memory(memory, embedder=HashEmbedder()) as m:
        m.index(["something"])
    assert run_cli(capsys, "--continual", "2", "--memory", str(memory))[0] == 1
