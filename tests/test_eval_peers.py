"""`engram eval` with a peer method beside hipporag2 and dense through the scripted server: recall, QA and the
cost table side by side; `engram eval --dry-run` estimates without a call; `engram add-method` and
`engram retrieve --method lightrag` on a memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram.cli import main
from engram.eval.costs import cost_table
from fake_openai import FakeOpenAI, task_of
from test_eval_report import write_data
from test_lightrag import handler as lightrag_handler


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENGRAM_LLM_BASE_URL", "ENGRAM_LLM_MODEL", "ENGRAM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)


def handler(request: dict[str, Any]) -> Any:
    if task_of(request) == "reader":
        return "From the passages.\nAnswer: Oslo"
    if task_of(request) == "filter":
        return '{"facts": [1]}'
    return lightrag_handler()(request)


def llm_args(fake: FakeOpenAI) -> list[str]:
    return ["--llm-base-url", fake.base_url, "--llm-model", "fake-model"]


def test_eval_lightrag_beside_hipporag2_and_dense(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_llm.handler = handler
    args = ["eval", *write_data(tmp_path), "--methods", "hipporag2,lightrag,dense", "--qa", "--json",
            *llm_args(fake_llm), "--bootstrap-samples", "100"]  # fmt: skip
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    rows = result["methods"]
    assert set(rows) == {"hipporag2", "lightrag", "dense"}
    assert rows["lightrag"]["em"] == 0.5 and rows["lightrag"]["recall"]["5"] > 0
    light, hippo, dense = rows["lightrag"]["cost"], rows["hipporag2"]["cost"], rows["dense"]["cost"]
    assert light["index_input_tokens"] > 0 and light["disk_mb"] > 0  # 5 extractions + 5 gleanings
    assert hippo["index_input_tokens"] == 0  # its extractions were imported
    assert dense["index_input_tokens"] == 0 and dense["query_tokens"] > 0  # the reader's tokens
    assert light["query_tokens"] > dense["query_tokens"]  # keywords on top of the reader
    table = cost_table(rows)
    assert table.splitlines()[0] == "| resource | hipporag2 | lightrag | dense |"
    assert "Indexing input tokens" in table


def test_cost_cells_read_as_numbers() -> None:
    costs = {"index_input_tokens": 3190.0, "index_output_tokens": 250_000.0, "query_seconds": 0.0377}
    table = cost_table({"hipporag2": {"cost": costs}, "raptor": {"cost": {**costs, "index_input_tokens": 12.5}}})
    lines = {line.split("|")[1].strip(): line for line in table.splitlines()}
    assert "| 3,190 (100.0%) | 12.5 (0.4%) |" in lines["Indexing input tokens"]  # never 3.19e+03
    assert "| 0.25M (100.0%) |" in lines["Indexing output tokens"]


def test_dry_run_estimates_every_method_without_a_call(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_data(tmp_path)
    data = data[: data.index("--extractions")] + data[data.index("--extractions") + 2 :]
    assert main(["eval", *data, "--methods", "hipporag2,lightrag,dense", "--dry-run", *llm_args(fake_llm)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in out.splitlines() if line.startswith("| ")}
    assert [c.strip() for c in rows["hipporag2"][:2]] == ["5", "10"]  # NER + triples per passage
    assert [c.strip() for c in rows["lightrag"][:2]] == ["5", "10"]  # extraction + one gleaning per chunk
    assert [c.strip() for c in rows["dense"]] == ["0", "0", "0"]
    assert fake_llm.attempts == 0


def test_add_method_then_retrieve_on_the_command_line(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_llm.handler = handler
    data = write_data(tmp_path)
    corpus, memory = data[data.index("--corpus") + 1], str(tmp_path / "m")
    extractions = data[data.index("--extractions") + 1]
    assert main(["index", corpus, "--memory", memory, "--extractions", extractions, "--embedder", "hash"]) == 0
    assert main(["add-method", "lightrag", "--memory", memory, "--embedder", "hash", *llm_args(fake_llm)]) == 0
    added = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert added["index"]["entities"] == 10 and added["costs"]["phases"]["index"]["calls"] == 10
    query = ["retrieve", "capital of Norway", "--memory", memory, "--embedder", "hash", "--method", "lightrag"]
    assert main([*query, *llm_args(fake_llm), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert json.dumps(found).find("oslo") >= 0
