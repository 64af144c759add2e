"""`PeerSet`: a memory's peer methods as `Memory` uses them: add one, keep those it holds in step after every
write, report their costs. It sees the memory only through a function that builds a `PeerHost`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engram.errors import InputError
from engram.retrieve import peers
from engram.retrieve.peers.base import PeerHost, PeerSync
from engram.store.peer_tables import PeerTables
from engram.types import IndexReport, Progress

HostFn = Callable[[PeerTables, Progress | None], PeerHost]


class PeerSet:
    """`tables` is None for a memory that cannot hold peers (PostgreSQL)."""

    def __init__(self, tables: PeerTables | None, host: HostFn) -> None:
        self.tables, self._host = tables, host

    def _tables(self) -> PeerTables:
        if self.tables is None:
            raise InputError("peer methods keep their index in a memory directory; PostgreSQL memories hold none")
        return self.tables

    def held(self) -> list[str]:
        return [] if self.tables is None else peers.enabled(self.tables)

    def add(self, name: str, progress: Progress | None = None, rebuild: bool = False) -> PeerSync:
        return peers.add(name, self._host(self._tables(), progress), rebuild=rebuild)

    def after_write(self, report: IndexReport) -> None:
        """Bring the held methods in step with the committed passages; their LLM usage joins `report.llm`
        (counts under `<method>_extracted`, `<method>_failed` and `<method>_pending` in `report.stats`; pending:
        new chunks that wait for a write with an LLM)."""
        if not self.held():
            return
        host = self._host(self._tables(), None)
        for done in peers.sync_all(host):
            report.stats[f"{done.method}_extracted"] = done.extracted
            report.stats[f"{done.method}_failed"] = done.failed
            report.stats[f"{done.method}_pending"] = done.stats.get("pending", 0)

    def costs(self, name: str) -> dict[str, Any]:
        return peers.costs(self._tables(), name)

    def close(self) -> None:
        if self.tables is not None:
            self.tables.close()
