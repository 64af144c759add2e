"""Two processes write different documents to one memory (PostgreSQL, or a directory) at once while a third
reads: every commit lands (a writer that loses the race for a generation reloads and retries), the reader never
fails and never goes back in time, and the result equals one writer's build of the same documents."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from pg_fixture import pg_server, with_schema  # noqa: F401
from pg_worker import document, open_memory
from test_continual import observe, same

WORKER = Path(__file__).resolve().parent / "pg_worker.py"
PER_WRITER = 12


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def result(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_two_writers_and_a_reader(pg_server: str, tmp_path: Path) -> None:  # noqa: F811
    url = with_schema(pg_server, f"writers_{uuid.uuid4().hex[:8]}")
    two_writers_and_a_reader(url, with_schema(pg_server, f"single_{uuid.uuid4().hex[:8]}"), tmp_path)


def test_two_writers_and_a_reader_on_a_directory(tmp_path: Path) -> None:
    """The same on a memory directory: SQLite serialises the commits, each process replays the others'."""
    two_writers_and_a_reader(str(tmp_path / "shared"), str(tmp_path / "single"), tmp_path)


def two_writers_and_a_reader(url: str, single: str, tmp_path: Path) -> None:
    with open_memory(url):  # created before the processes start (creation itself is also safe to race)
        pass
    final = 2 * PER_WRITER
    gate = str(tmp_path / "reader-started")  # the writers commit only once the reader has read (it may start slowly)
    reader = start("read", url, str(final), "240", gate)
    writers = [start("write", url, f, str(PER_WRITER), gate) for f in ("0", str(PER_WRITER))]
    written = [result(w) for w in writers]
    seen = result(reader)
    assert [w["written"] for w in written] == [PER_WRITER, PER_WRITER]
    print("commits retried after losing the race:", [w["retries"] for w in written])
    assert not seen["errors"], seen["errors"][0]
    print("reader refreshes: replayed", seen["replayed"], "reloaded", seen["reloaded"])
    assert seen["replayed"] >= 1  # other processes' commits are replayed from the log
    assert seen["generations"] == sorted(seen["generations"]) and seen["passages"] == sorted(seen["passages"])
    assert seen["generations"][-1] == final and seen["passages"][-1] == final
    assert seen["generations"][0] == 0  # it read before the first commit and went on until the last
    docs = [document(i) for i in range(final)]
    with open_memory(url) as shared, open_memory(single) as one:
        one.index([d for d, _ in docs], extractions=[e for _, e in docs])
        assert shared.stats()["generation"] == final and set(shared.documents()) == {d.id for d, _ in docs}
        same(observe(shared), observe(one))
