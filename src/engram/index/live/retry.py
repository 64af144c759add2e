"""Retrying a write that lost the race for a generation: another writer (a thread, another process, another
machine sharing a PostgreSQL memory) committed first, so the change is prepared again on the new state.

A write that keeps losing (a long batch beside servers that commit all the time) would lose every time it
merely tried again, so from the second attempt on it holds the memory's write turn (`turn`, the live index's:
the other writers' commits wait for it), after a growing random pause. A write still refused after `ATTEMPTS`
tries (beside writers that take no turn: an older engram) gives up with a `ConflictError` that says so."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

from engram.errors import ConflictError

T = TypeVar("T")
log = logging.getLogger(__name__)
ATTEMPTS = 8  # a writer that loses this many races in a row gives up with ConflictError
FIRST_WAIT, LONGEST_WAIT = 0.05, 2.0  # seconds: the pauses double from the first up to the longest
MAX_WAIT = sum(min(LONGEST_WAIT, FIRST_WAIT * 2**i) for i in range(ATTEMPTS - 1))  # all pauses: at most 6.35 s


def pause(attempt: int) -> float:
    """The pause after the `attempt`-th lost race: drawn from [b/2, b], b doubling from FIRST_WAIT."""
    ceiling = min(LONGEST_WAIT, FIRST_WAIT * 2 ** (attempt - 1))
    return float(ceiling * random.uniform(0.5, 1.0))


def retry_conflicts(
    write: Callable[[], T],
    attempts: int = ATTEMPTS,
    turn: Callable[[], AbstractContextManager[object]] | None = None,
) -> T:
    """`write()`, run again while it raises `ConflictError`, at most `attempts` times in all. Each attempt reads
    the records afresh (the live index reloads the newer generation), and extractions and vectors of the
    earlier attempt are cached, so a retry repeats no LLM or embedding work. `turn`: the write turn to hold
    from the second attempt on (no other writer commits meanwhile)."""
    for attempt in range(1, attempts + 1):
        try:
            with turn() if turn is not None and attempt > 1 else nullcontext():
                return write()
        except ConflictError as exc:
            if attempt == attempts:
                raise ConflictError(
                    f"{exc} (gave up after {attempts} attempts: other writers committed first every time; "
                    "an engram older than this one on the same memory takes no write turn: upgrade it)"
                ) from exc
            wait = pause(attempt)
            log.info("another writer committed first: preparing the change again in %.2f s (attempt %d)", wait,
                     attempt + 1)  # fmt: skip
            time.sleep(wait)
    raise AssertionError("unreachable")
