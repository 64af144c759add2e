"""Running the installed local model: `llama-server` as a subprocess on a free 127.0.0.1 port.

`LocalServer` starts the server (`engram.llm.local_install` put it and the model in place), waits for its
health check and stops it on exit; the process is also killed if its parent dies (Linux), so a killed engram
leaves no server behind. Its output goes to a log file; a server that exits while starting is reported with
the end of that log, never waited on. The frequency penalty stops the repetition loops small models fall into
on long passages; `slots` parallel sequences share the context, which batches well on a CPU (decoding is
memory-bound).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from engram.errors import EngramError
from engram.llm.local_install import MODEL_NAME, LocalPaths, local_dir

STARTUP_TIMEOUT = 180.0  # seconds to load 1.1 GB of weights on a loaded machine
CONTEXT_PER_SLOT = 4096  # prompt (examples, passage, entities) plus the reply, with room to spare
FREQUENCY_PENALTY = 0.3
LOG_TAIL_LINES = 20
KEEP_LOGS = 10  # server logs kept in the logs folder


class LocalServerError(EngramError):
    """The local server could not start, or stopped while it was in use; the message quotes its log."""


class LocalServer:
    """`llama-server` serving the local model at `base_url` (OpenAI-compatible, ending in /v1).

    Use as a context manager (or `start()` / `stop()`). `threads` defaults to the machine's cores, `slots` is
    how many requests it decodes together (`-np`); `extra_args` go to llama-server as they are.
    """

    def __init__(
        self,
        paths: LocalPaths | None = None,
        *,
        threads: int | None = None,
        slots: int = 1,
        frequency_penalty: float = FREQUENCY_PENALTY,
        startup_timeout: float = STARTUP_TIMEOUT,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        if slots < 1 or (threads is not None and threads < 1):
            raise LocalServerError("the local server needs slots >= 1 and threads >= 1")
        self.paths = paths or LocalPaths(local_dir())
        self.threads = threads or os.cpu_count() or 2
        self.slots = slots
        self.frequency_penalty = frequency_penalty
        self.startup_timeout = startup_timeout
        self.extra_args = extra_args
        self.model = MODEL_NAME
        self.port = 0
        self.log: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self, port: int) -> list[str]:
        return [
            str(self.paths.server),
            "-m", str(self.paths.model),
            "--alias", self.model,
            "--host", "127.0.0.1",
            "--port", str(port),
            "-t", str(self.threads),
            "-c", str(CONTEXT_PER_SLOT * self.slots),
            "-np", str(self.slots),
            "--frequency-penalty", f"{self.frequency_penalty:g}",
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> LocalServer:
        """Start the server and wait until it answers its health check. Raises `LocalServerError`."""
        missing = self.paths.missing()
        if missing:
            raise LocalServerError(
                f"the local LLM is not installed: {' and '.join(missing)} missing; run `engram local setup` "
                f"(about 1.1 GB and a 15-minute build, once; ENGRAM_LOCAL_DIR moves it from {self.paths.root})"
            )
        self.port = free_port()
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        _prune_logs(self.paths.logs)
        self.log = self.paths.logs / f"llama-server-{self.port}.log"  # one per server: two may run at once
        self._log_file = open(self.log, "wb")  # noqa: SIM115 (open while the server runs; closed by stop())
        self._process = subprocess.Popen(
            self.command(self.port),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self.exit_code()
            if code is not None:
                raise LocalServerError(f"llama-server exited with code {code} while starting. {self.log_tail()}")
            if _healthy(f"http://127.0.0.1:{self.port}/health"):
                return
            if time.monotonic() > deadline:
                raise LocalServerError(
                    f"llama-server did not become healthy within {self.startup_timeout:g} s. {self.log_tail()}"
                )
            time.sleep(0.25)

    def exit_code(self) -> int | None:
        """The server's exit code once it has stopped, else None."""
        return None if self._process is None else self._process.poll()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The end of the server's log, as a sentence for error messages."""
        if self.log is None or not self.log.exists():
            return "It wrote no log."
        text = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return f"The end of its log ({self.log}):\n" + "\n".join(text[-lines:])

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); safe to call twice."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _prune_logs(folder: Path, keep: int = KEEP_LOGS) -> None:
    """Remove all but the newest `keep` - 1 server logs (the next server adds one)."""
    logs = sorted(folder.glob("llama-server-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in logs[keep - 1 :]:
        old.unlink(missing_ok=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False  # not listening yet, or 503 while the model loads


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGTERM it when the parent dies (prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
