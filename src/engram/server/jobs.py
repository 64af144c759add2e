"""Jobs: writes that call an LLM (extraction) run in the background and report progress.

A job runs a function that takes a progress callback (`Memory.index(progress=...)`'s signature); its state is
queued -> running -> done | failed. Finished jobs are kept (the newest `keep`) so clients can read results.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engram.server.errors import api_error

Progress = Callable[[str, int, int], None]
Work = Callable[[Progress], dict[str, Any]]


@dataclass
class Job:
    id: str
    memory: str
    kind: str
    state: str = "queued"
    progress: dict[str, dict[str, int]] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    done_event: threading.Event = field(default_factory=threading.Event, repr=False)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "memory": self.memory,
            "kind": self.kind,
            "state": self.state,
            "progress": {stage: dict(p) for stage, p in self.progress.items()},
            "result": self.result,
            "error": self.error,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
        }


class Jobs:
    """Runs jobs on a small thread pool; thread-safe."""

    def __init__(self, workers: int = 2, keep: int = 1000) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="engram-job")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._keep = keep

    def submit(self, memory: str, kind: str, work: Work) -> Job:
        job = Job(id=uuid.uuid4().hex, memory=memory, kind=kind)
        with self._lock:
            self._jobs[job.id] = job
            self._forget_old()
        self._pool.submit(self._run, job, work)
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def _forget_old(self) -> None:
        finished = [j.id for j in self._jobs.values() if j.done_event.is_set()]
        for job_id in finished[: max(0, len(self._jobs) - self._keep)]:
            del self._jobs[job_id]

    def _run(self, job: Job, work: Work) -> None:
        job.state, job.started = "running", time.time()

        def progress(stage: str, done: int, total: int) -> None:
            job.progress[stage] = {"done": int(done), "total": int(total)}

        try:
            job.result = work(progress)
            job.state = "done"
        except Exception as exc:  # the job's failure is its result: reported, never raised into the pool
            error = api_error(exc)
            job.error = {"type": error.type, "message": error.message, "status": error.status}
            job.state = "failed"
        finally:
            job.finished = time.time()
            job.done_event.set()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
