"""Bulk building of Python objects: the cyclic garbage collector paused while millions are made.

Python runs a collection every few hundred new container objects (lists, tuples, dicts, sets), and a full one
walks every container alive. A restore of a 100k-passage memory makes millions (fact tuples, name tables,
synonym lists) while millions more are alive, so the collections it sets off cost more than the building
itself (measured: open 3.4 -> 2.5 s; the first write's synonym lists 2.0 -> 0.1 s). None of what these passes
make is garbage in a cycle, so pausing the collector for them loses nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(collect_first: bool = False) -> Iterator[None]:
    """Pause automatic garbage collection for the block. `collect_first`: run one collection before, so garbage
    waiting for one (a memory closed just before an open) is freed before the block allocates rather than at
    the next full collection. Enabled again after, unless it was off before (a thread that pauses meanwhile at
    worst finds it on: it is never left off)."""
    enabled = gc.isenabled()
    if enabled and collect_first:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
