"""Retrying a write that lost the race for a generation: another writer (a thread, another process, another
machine sharing a PostgreSQL memory) committed first, so the change is prepared again on the new state."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from engram.errors import ConflictError

T = TypeVar("T")
log = logging.getLogger(__name__)
ATTEMPTS = 8  # a writer that loses this many races in a row gives up with ConflictError


def retry_conflicts(write: Callable[[], T], attempts: int = ATTEMPTS) -> T:
    """`write()`, run again (after a short random pause) while it raises `ConflictError`. Each attempt reads
    the records afresh (the live index reloads the newer generation), and extractions and vectors of the
    earlier attempt are cached, so a retry repeats no LLM or embedding work."""
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except ConflictError:
            if attempt == attempts:
                raise
            log.info("another writer committed first: preparing the change again (attempt %d)", attempt + 1)
            time.sleep(random.uniform(0.01, 0.05) * attempt)
    raise AssertionError("unreachable")
