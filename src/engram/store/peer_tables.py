"""The tables of the peer retrieval methods (LightRAG, ...) in a memory's engram.sqlite, beside the shared
ones. Each method owns tables whose names start with `<method>_` (dashes become underscores); the
`peer_methods` table records which methods a memory holds and the version of each one's tables, and
`peer_costs` what each method spent (see docs/format.md, "Peer methods").

A peer's tables are derived data (rebuilt from the passages and the LLM response cache), so a version other
than the one the code writes drops the method's tables and the method indexes again.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engram.errors import MemoryFormatError
from engram.store.sqlite_file import damaged, is_damage

SCHEMA = """
CREATE TABLE IF NOT EXISTS peer_methods (name TEXT PRIMARY KEY, version INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS peer_costs (
    method TEXT NOT NULL, phase TEXT NOT NULL CHECK (phase IN ('index', 'query')),
    runs INTEGER NOT NULL DEFAULT 0, calls INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, cache_hits INTEGER NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0, PRIMARY KEY (method, phase));
"""
COST_FIELDS = ("runs", "calls", "prompt_tokens", "completion_tokens", "cache_hits", "seconds")


def table_prefix(method: str) -> str:
    return method.replace("-", "_") + "_"


class PeerTables:
    """One connection to the records file for the peer methods; reads and transactions are serialised."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        # what a method derived from its tables and keeps for the next call, under a key that names the
        # tables' state (e.g. LightRAG's vector matrices under its merge digest)
        self.derived: dict[str, tuple[str, Any]] = {}

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA busy_timeout=30000")
            except sqlite3.Error as exc:
                raise damaged(self.path, exc) from exc
            self._db = db
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._connection()
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._connection().execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error) -> Exception:
        return damaged(self.path, exc) if is_damage(exc) else exc

    # which methods the memory holds --------------------------------------------------------------------
    def _created(self) -> bool:
        return bool(self.read("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'peer_methods'"))

    def methods(self) -> dict[str, int]:
        """Method name -> version of its tables; empty (and nothing created) in a memory without peers."""
        if not self._created():
            return {}
        return {str(name): int(v) for name, v in self.read("SELECT name, version FROM peer_methods")}

    def ensure(self, method: str, version: int, schema: str) -> bool:
        """Create `method`'s tables (`schema`, CREATE ... IF NOT EXISTS statements) and record it; tables of
        another version are dropped first. True when the method's tables were (re)created empty."""
        known = self.methods().get(method)
        if known == version:
            return False
        if known is not None and known > version:
            raise MemoryFormatError(
                f"{self.path} holds {method} tables of version {known}, newer than this engram's {version}: "
                "upgrade engram"
            )
        with self.transaction() as db:
            for statement in (s.strip() for s in SCHEMA.split(";")):
                if statement:
                    db.execute(statement)
            for name in self._tables_of(db, method):
                db.execute(f'DROP TABLE "{name}"')
            for statement in (s.strip() for s in schema.split(";")):
                if statement:
                    db.execute(statement)
            db.execute(
                "INSERT OR REPLACE INTO peer_methods (name, version, created) VALUES (?, ?, ?)",
                (method, version, time.time()),
            )
            db.execute("DELETE FROM peer_costs WHERE method = ?", (method,))
        return True

    @staticmethod
    def _tables_of(db: sqlite3.Connection, method: str) -> list[str]:
        prefix = table_prefix(method)
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return [str(r[0]) for r in rows if str(r[0]).startswith(prefix)]

    def disk_bytes(self, method: str) -> int:
        """Bytes of the method's tables and indexes in the file (SQLite's dbstat), 0 where dbstat is missing."""
        prefix = table_prefix(method)
        try:
            rows = self.read("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
        except sqlite3.OperationalError:
            return 0
        names = {str(r[0]) for r in self.read("SELECT name FROM sqlite_master WHERE tbl_name LIKE ?", (prefix + "%",))}
        return int(sum(int(size or 0) for name, size in rows if str(name) in names))

    # what each method spent -----------------------------------------------------------------------------
    def add_cost(self, method: str, phase: str, amounts: dict[str, float]) -> None:
        values = [amounts.get(f, 0) for f in COST_FIELDS]
        sets = ", ".join(f"{f} = {f} + excluded.{f}" for f in COST_FIELDS)
        with self.transaction() as db:
            db.execute(
                f"INSERT INTO peer_costs (method, phase, {', '.join(COST_FIELDS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                f"ON CONFLICT (method, phase) DO UPDATE SET {sets}",
                (method, phase, *values),
            )

    def costs(self, method: str) -> dict[str, dict[str, float]]:
        if not self._created():
            return {}
        rows = self.read(f"SELECT phase, {', '.join(COST_FIELDS)} FROM peer_costs WHERE method = ?", (method,))
        return {str(r[0]): dict(zip(COST_FIELDS, r[1:])) for r in rows}
