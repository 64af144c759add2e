"""A writer that keeps losing the race for a generation (issue 52, item 6: a CLI `index` beside two servers gave
up with "changed by another writer meanwhile" in 20 of 39 runs). Against a real PostgreSQL: one handle indexes a
batch while another commits one document after another all along; the batch must land, after retries, and the
other writer's commits too. And the bound: a write that loses every race gives up after `ATTEMPTS` tries, with a
message that says so."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest

from engram import ConflictError, Document
from engram.index.live import retry
from pg_fixture import pg_server, with_schema  # noqa: F401
from pg_worker import document, open_memory

BATCH = 60


def test_a_batch_lands_while_another_writer_commits_all_along(
    pg_server: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = with_schema(pg_server, f"conflicts_{uuid.uuid4().hex[:8]}")
    with open_memory(url) as memory:
        memory.index([document(i)[0] for i in range(20)], extractions=[document(i)[1] for i in range(20)])
    done, other = threading.Event(), {"commits": 0, "error": None}

    def keep_committing() -> None:
        with open_memory(url) as second:
            i = 0
            while not done.is_set():
                try:
                    second.index([Document(f"other{i:04d}", f"Note {i} of the other writer about the old mill.")])
                except Exception as exc:  # reported to the test
                    other["error"] = exc
                    return
                other["commits"] += 1
                i += 1

    batch = [document(i) for i in range(100, 100 + BATCH)]
    with open_memory(url) as memory, caplog.at_level(logging.INFO, logger="engram.index.live.retry"):
        competitor = threading.Thread(target=keep_committing, daemon=True)
        competitor.start()
        while other["commits"] < 3 and competitor.is_alive():
            time.sleep(0.01)
        start = time.monotonic()
        try:
            report = memory.index([d for d, _ in batch], extractions=[e for _, e in batch])
        finally:
            done.set()
            competitor.join(60)
        elapsed = time.monotonic() - start
        assert other["error"] is None, other["error"]
        assert len(report.added) == BATCH
        assert set(memory.documents()) >= {d.id for d, _ in batch}
        assert memory.stats()["documents"] == 20 + BATCH + other["commits"]
    retried = [r for r in caplog.records if r.name == "engram.index.live.retry"]
    print(f"batch landed in {elapsed:.1f} s after {len(retried)} retries; the other writer: {other['commits']} commits")
    assert other["commits"] >= 5  # the two really raced


def test_a_write_that_always_loses_gives_up_after_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    tries: list[float] = []
    waits: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", waits.append)

    def always_beaten() -> None:
        tries.append(time.monotonic())
        raise ConflictError("the memory was changed by another writer meanwhile: run the command again")

    with pytest.raises(ConflictError, match=f"gave up after {retry.ATTEMPTS} attempts") as failure:
        retry.retry_conflicts(always_beaten)
    assert len(tries) == retry.ATTEMPTS and len(waits) == retry.ATTEMPTS - 1
    assert "another writer" in str(failure.value)
    assert waits[-1] > waits[0] and sum(waits) <= retry.MAX_WAIT  # backoff grows, within a bound
