"""The real local model end to end: `engram index` of 20 shared MuSiQue passages with `--llm local`, then
`retrieve` and `ask`. Runs when `engram local setup` has installed the model (ENGRAM_LOCAL_DIR, default
~/.cache/engram/local) and the shared data is present; skipped with the reason otherwise. A few minutes on 2
idle cores; `-m "not real_llm"` leaves it out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram.llm.local_install import LocalPaths, local_dir

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
PASSAGES = 20
MISSING = LocalPaths(local_dir()).missing()
pytestmark = [
    pytest.mark.real_llm,
    pytest.mark.skipif(bool(MISSING), reason=f"the local model is not installed ({', '.join(MISSING)}): run "
                       "`engram local setup`"),
    pytest.mark.skipif(not (DATA / "corpus.jsonl").exists(), reason="shared MuSiQue data not present"),
]


def engram(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_LLM_")}
    return subprocess.run(
        [sys.executable, "-m", "engram.cli", *args], capture_output=True, text=True, timeout=timeout,
        env={**env, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip


def test_index_retrieve_and_ask_with_the_local_model(tmp_path: Path) -> None:
    questions = [json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines()]
    question = questions[0]
    rows = {r["id"]: r for r in map(json.loads, (DATA / "corpus.jsonl").read_text().splitlines())}
    chosen = list(dict.fromkeys([*question["gold"], *list(rows)[:PASSAGES]]))[:PASSAGES]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(rows[i]) + "\n" for i in chosen))
    memory = str(tmp_path / "m")
    indexed = engram(["index", str(corpus), "--memory", memory, "--llm", "local"], timeout=1800)
    assert indexed.returncode == 0, indexed.stderr
    stats = json.loads(engram(["stats", "--memory", memory, "--json"], timeout=300).stdout)
    assert stats["passages"] == PASSAGES and stats["pending"] == 0, stats
    assert stats["facts"] >= PASSAGES  # a real model states at least a fact a passage on these
    found = engram(["retrieve", question["question"], "--memory", memory, "--llm", "local", "--json"], timeout=600)
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert result["passages"] and result["filtered"] is True
    asked = engram(["ask", question["question"], "--memory", memory, "--llm", "local", "--json"], timeout=600)
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["answer"].strip()
