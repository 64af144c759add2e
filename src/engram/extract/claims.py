"""Claims on extraction work, so that any number of `engram extract` processes (on any number of machines, for a
PostgreSQL memory) share one memory's pending passages and none is sent to the LLM twice.

A worker (one extraction run) leases passages by content hash from the store (`Store.claim_extractions`), a
window at a time, as its LLM slots free up; its heartbeat renews the leases it still works on every third of
the lease; each finished passage's claim goes in the transaction that stores its extraction. A worker that is
killed loses only its leases: they lapse `lease` seconds after its last renewal (at once, for a worker on the
same host whose process is gone), and the others take them. A passage is claimable only while its extraction
row is as the claiming worker read it at its start, so what another worker finished or failed meanwhile is
never sent again (a failure is retried by a later run, as before). See docs/scale.md, "Several extract
workers", and docs/format.md, "claims".
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from engram.errors import InputError
from engram.store.base import Store
from engram.store.rows import PassageRow

LEASE_VARIABLE = "ENGRAM_EXTRACT_LEASE"  # seconds a claim lasts without renewal
WORKER_VARIABLE = "ENGRAM_EXTRACT_WORKER"  # a name for this process's workers (a pod, a job), shown in the claims
DEFAULT_LEASE = 120.0
MIN_LEASE = 0.5
POLL_LONGEST = 1.0  # seconds a waiting worker sleeps at most between looks at the others' leases
POLL_SHORTEST = 0.05
CHUNK = 256  # content hashes one claim looks at, at most
_LOCAL = re.compile(r"(?P<host>\S+) pid (?P<pid>\d+) [0-9a-f]{8}")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimSettings:
    """`lease`: seconds a claim lasts without renewal; `wait`: when nothing is free but other workers still hold
    leases, wait (polling) until they finish or lapse, then take the lapsed ones (`Memory.extract`); without it
    the passages others hold are left to them (`Memory.index`); `name`: the workers' name ($ENGRAM_EXTRACT_WORKER,
    else "HOST pid PID")."""

    lease: float = DEFAULT_LEASE
    wait: bool = False
    name: str | None = None

    @classmethod
    def from_environment(cls, lease: float | None = None, wait: bool = False) -> ClaimSettings:
        """`lease` if given, else $ENGRAM_EXTRACT_LEASE, else `DEFAULT_LEASE`; the name from $ENGRAM_EXTRACT_WORKER."""
        if lease is None:
            text = os.environ.get(LEASE_VARIABLE, "").strip()
            try:
                lease = float(text) if text else DEFAULT_LEASE
            except ValueError as exc:
                raise InputError(f"{LEASE_VARIABLE}={text!r}: give the lease in seconds (a number)") from exc
        if not lease >= MIN_LEASE or lease == float("inf"):
            raise InputError(f"an extraction lease of {lease} s: give at least {MIN_LEASE} seconds")
        name = os.environ.get(WORKER_VARIABLE, "").strip() or None
        return cls(lease=float(lease), wait=wait, name=name)

    def worker(self) -> str:
        """A new worker id: the name (or "HOST pid PID") and a random suffix, unique per run."""
        base = self.name or f"{socket.gethostname() or 'localhost'} pid {os.getpid()}"
        return f"{base} {uuid.uuid4().hex[:8]}"


def gone_locally(worker: str) -> bool:
    """Whether `worker` is an unnamed worker of this host whose process no longer runs (its leases are dead)."""
    found = _LOCAL.fullmatch(worker)
    if found is None or found["host"] != (socket.gethostname() or "localhost"):
        return False
    pid = int(found["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user runs under that id
        return False
    return False


class ClaimFeed:
    """The passages of one worker, claimed from the store a `batch` at a time as they are asked for: an iterator of
    `(id, text, title)` for `engram.extract.openie.extract_many`. `passages` hold each content once; `seen` is the
    attempts of each one's extraction row when the run read it (absent: no row)."""

    def __init__(
        self,
        store: Store,
        passages: Sequence[PassageRow],
        seen: Mapping[str, int],
        settings: ClaimSettings,
        batch: int,
    ) -> None:
        self.store, self.settings, self.batch = store, settings, max(1, batch)
        self.worker = settings.worker()
        self.by_hash = {p.content_hash: p for p in passages}
        self.seen = {h: seen.get(h, 0) for h in self.by_hash}
        self.remaining: deque[str] = deque(self.by_hash)
        self.ready: deque[str] = deque()
        self.held: dict[str, tuple[str, float]] = {}  # hash -> (worker, monotonic time its lease ends)
        self.gone = 0  # passages another worker finished (or failed) first
        self._lock = threading.Lock()
        self._working: set[str] = set()  # claimed and not yet stored: what the heartbeat renews
        self._released: set[str] = set()  # dead local workers whose claims this feed dropped

    def __iter__(self) -> Iterator[tuple[str, str, str | None]]:
        return self

    def __next__(self) -> tuple[str, str, str | None]:
        if not self.ready:
            self._claim()
        if not self.ready:
            raise StopIteration
        p = self.by_hash[self.ready.popleft()]
        return p.id, p.text, p.title

    def _claim(self) -> None:
        while self.remaining and not self.ready:
            chunk = [self.remaining[i] for i in range(min(CHUNK, len(self.remaining)))]
            got = self.store.claim_extractions(
                self.worker, [(h, self.seen[h]) for h in chunk], self.batch, self.settings.lease
            )
            now = time.monotonic()
            dead = {holder for holder, _ in got.held.values() if holder not in self._released and gone_locally(holder)}
            for holder in sorted(dead):  # a killed run of this host: its claims are free now, even without waiting
                log.info("extraction worker %r is gone: its claims are taken over", holder)
                self.store.release_claims(holder)
                self._released.add(holder)
            held = {d: v for d, v in got.held.items() if v[0] not in dead}  # the dead one's: claimed next round
            settled = {*got.taken, *got.gone, *held}
            self.remaining = deque(h for h in self.remaining if h not in settled)
            with self._lock:
                self._working.update(got.taken)
            self.ready.extend(got.taken)
            self.gone += len(got.gone)
            for digest, (holder, left) in held.items():
                self.held[digest] = (holder, now + left)
            if not settled and not dead:  # each free one was being claimed by another worker just now: look later
                break

    def finished(self, digest: str) -> None:
        """`digest` is stored (its claim went with it): no more renewals."""
        with self._lock:
            self._working.discard(digest)

    def working(self) -> list[str]:
        with self._lock:
            return sorted(self._working)

    def unstarted(self) -> int:
        """Passages not sent: claimed and not started, never claimed, or held by others."""
        return len(self.ready) + len(self.remaining) + len(self.held)

    def others_pending(self) -> bool:
        """Whether passages are left that other workers hold, or that could not be claimed this moment."""
        return bool(self.held or self.remaining)

    def next_round(self) -> float:
        """Prepare another pass over what others held: leases of dead local workers are dropped, the held
        passages go back to be claimed. Returns the seconds to sleep before it (until the first lease may lapse,
        within `POLL_SHORTEST` .. `POLL_LONGEST`)."""
        holders = {holder for holder, _ in self.held.values()}
        dead = sorted(h for h in holders if gone_locally(h))
        for holder in dead:
            log.info("extraction worker %r is gone: its claims are taken over", holder)
            self.store.release_claims(holder)
        now = time.monotonic()
        lapses = [end - now for holder, end in self.held.values() if holder not in dead]
        pause = min([POLL_LONGEST, *lapses]) + POLL_SHORTEST if lapses else POLL_SHORTEST
        if dead:
            pause = POLL_SHORTEST
        self.remaining.extend(self.held)
        self.held.clear()
        return max(POLL_SHORTEST, min(POLL_LONGEST, pause))

    def release(self) -> None:
        """Give back every claim this worker still has (what a budget stop or an error left unstarted)."""
        self.ready.clear()
        with self._lock:
            self._working.clear()
        self.store.release_claims(self.worker)


class Heartbeat:
    """Renews a feed's working leases every third of the lease, on a thread of its own, while in a `with`."""

    def __init__(self, feed: ClaimFeed) -> None:
        self.feed = feed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engram-claims", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        every = self.feed.settings.lease / 3
        while not self._stop.wait(every):
            hashes = self.feed.working()
            if not hashes:
                continue
            try:
                self.feed.store.renew_claims(self.feed.worker, hashes, self.feed.settings.lease)
            except Exception as exc:  # any store error (either backend's): the next beat tries again, and a
                log.warning("renewing extraction leases failed: %s", exc)  # lapsed lease risks a repeat, no more
