"""`engram eval --out` reports, passage-weight sweeps, IRCoT and QA rows through the CLI, and `engram report`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram.cli import main
from engram.eval import report as report_module
from engram.eval.report import compare_runs, markdown_report, write_run
from engram.eval.runner import plan_methods
from engram.retrieve.ircot import IRCOT_SYSTEM
from fake_openai import FakeOpenAI, task_of
from helpers import DOCS, EXTRACTIONS


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)


def write_data(folder: Path) -> list[str]:
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in DOCS))
    extractions = folder / "openie.jsonl"
    extractions.write_text("".join(json.dumps(e) + "\n" for e in EXTRACTIONS))
    questions = folder / "questions.jsonl"
    rows = [
        {"id": "q1", "question": "Where was the founder of Acme Tools born?", "answers": ["Lyon"],
         "gold": ["acme", "alice"], "hops": "2hop"},
        {"id": "q2", "question": "capital of Norway", "answers": ["Oslo"], "gold": ["oslo"], "hops": "1hop"},
    ]  # fmt: skip
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    entities = folder / "entities.jsonl"
    entities.write_text(json.dumps({"id": "q1", "entities": ["Acme Tools"]}) + "\n")
    return ["--corpus", str(corpus), "--questions", str(questions), "--extractions", str(extractions),
            "--embedder", "hash", "--query-entities", str(entities)]  # fmt: skip


def test_plan_methods() -> None:
    specs = plan_methods(["dense", "hipporag2"], [0.01, 0.5], ircot_steps=2)
    assert [s.name for s in specs] == [
        "dense",
        "hipporag2@pw=0.01",
        "hipporag2@pw=0.5",
        "ircot-dense",
        "ircot-hipporag2@pw=0.01",
        "ircot-hipporag2@pw=0.5",
    ]
    assert specs[-1].passage_weight == 0.5 and specs[-1].ircot_steps == 2 and specs[-1].method == "hipporag2"


def test_eval_writes_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    methods = "bm25,dense,hipporag1,hipporag2,hipporag2-ner-to-node,hipporag2-query-to-node,hipporag2-no-passage-nodes"
    args = ["eval", *write_data(tmp_path), "--methods", methods, "--out", str(run), "--top-k", "5",
            "--passage-weight", "0.05", "--passage-weight", "0.5", "--bootstrap-samples", "200"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| hipporag2@pw=0.5 |" in out and "| hipporag1 |" in out
    result = json.loads((run / "results.json").read_text())
    assert set(result["methods"]["dense"]["recall"]) == {"1", "2", "5"}  # depth 5
    assert result["methods"]["hipporag1"]["dense_fallbacks"] == 1  # q2 has no entities and there is no LLM
    assert set(result["methods"]["dense"]["per_hop"]) == {"1hop", "2hop"}
    assert {c["metric"] for c in result["comparisons"]} == {"recall@2", "recall@5"}
    details = [json.loads(line) for line in (run / "details.jsonl").read_text().splitlines()]
    assert len(details) == 2 * 10  # bm25, dense, hipporag1, no-passage-nodes, three methods x two weights
    row = next(d for d in details if d["method"] == "hipporag2@pw=0.05" and d["id"] == "q1")
    assert row["gold"] == ["acme", "alice"] and len(row["retrieved"]) == 5 and row["facts"] and row["seeds"]
    report = (run / "report.md").read_text()
    assert "## Recall" in report and "## Paired bootstrap" in report and "recall_at_k.png" in report
    for png in ("recall_at_k.png", "per_hop.png"):
        assert (run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["report", str(run), str(run), "--out", str(tmp_path / "cmp.md")]) == 0
    compared = capsys.readouterr().out
    assert "| run: hipporag1 |" in compared and "| run (2): hipporag1 |" in compared
    assert (tmp_path / "cmp.png").exists()


def test_report_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_module, "_pyplot", lambda: None)
    result: dict[str, Any] = {
        "methods": {"dense": {"recall": {"1": 0.5, "5": 1.0}, "all_recall": {"5": 1.0}, "seconds_per_query": 0.001}},
        "comparisons": [],
    }
    written = write_run(tmp_path / "run", result, [{"method": "dense", "id": "q"}])
    assert written.plots_skipped and "matplotlib" in written.plots_skipped
    assert not (tmp_path / "run" / "recall_at_k.png").exists()
    assert "png" not in (tmp_path / "run" / "report.md").read_text()
    text, cmp = compare_runs([tmp_path / "run"], tmp_path / "cmp.md")
    assert "| run: dense | 0.500 | 1.000 | 1.000 | 1.0 |" in text and cmp.plots_skipped


def test_markdown_report_lists_answers_and_bootstrap() -> None:
    result = {
        "setup": {"methods": ["dense"]},
        "methods": {
            "dense": {"recall": {"5": 0.5}, "all_recall": {}, "em": 0.25, "f1": 0.5, "seconds_per_query": 0.01},
        },
        "comparisons": [
            {"a": "x", "b": "dense", "metric": "recall@5", "delta": 0.1, "ci": [0.0, 0.2], "p_value": 0.04,
             "samples": 100},
        ],
    }  # fmt: skip
    text = markdown_report(result, plots=False)
    assert "| dense | 0.500 | 0.250 | 0.500 | 10.0 |" in text
    assert "| x | dense | recall@5 | +0.100 | [+0.000, +0.200] | 0.0400 |" in text


def test_report_rejects_a_folder_without_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 1
    assert "not an eval run directory" in capsys.readouterr().err


def test_eval_ircot_and_qa_through_the_fake_server(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    def handler(request: dict[str, Any]) -> str:
        system = request["messages"][0]["content"]
        if system == IRCOT_SYSTEM:
            return "Answer: Lyon"
        if task_of(request) == "reader":
            return "It is in the passages.\nAnswer: Oslo"
        if task_of(request) == "filter":
            return '{"facts": [1]}'
        return '{"entities": ["Norway"]}'  # query NER for q2 (missing from the entities file)

    fake_llm.handler = handler
    args = ["eval", *write_data(tmp_path), "--methods", "dense,hipporag1", "--ircot-steps", "2", "--qa", "--json",
            "--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model", "--bootstrap-samples", "100"]  # fmt: skip
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["methods"]) == {"dense", "hipporag1", "ircot-dense", "ircot-hipporag1"}
    ircot = result["methods"]["ircot-dense"]
    assert ircot["em"] == 0.5 and ircot["answered"] == 2 and ircot["ircot_steps"] == 2  # Lyon right, Oslo wrong
    assert result["methods"]["dense"]["em"] == 0.5  # the reader says Oslo: right for q2 only
    assert "dense_fallbacks" not in result["methods"]["hipporag1"]  # the LLM found entities for q2
    metrics = {(c["a"], c["metric"]) for c in result["comparisons"]}
    assert ("ircot-hipporag1", "recall@5") in metrics


def test_eval_refuses_entity_methods_without_entities_or_llm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = write_data(tmp_path)
    args = args[: args.index("--query-entities")]
    assert main(["eval", *args, "--methods", "hipporag1"]) == 1
    assert "query entities" in capsys.readouterr().err
    assert main(["eval", *args, "--methods", "dense", "--ircot-steps", "2"]) == 1
    assert "need an LLM" in capsys.readouterr().err
