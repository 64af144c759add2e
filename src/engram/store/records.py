"""SQLite record store: documents, passages, extractions, the embedding cache and the LLM response cache.

Every write happens in a transaction; extraction results are committed one passage at a time, so finished
LLM work survives a crash. See docs/format.md for the schema.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.errors import InputError, MemoryFormatError
from engram.store.base import DANGLING, LOG_KEPT
from engram.store.migrate import migrate
from engram.store.rows import Claimed, ColumnLookup, ExtractionRow, PassageRow, parse_generation
from engram.store.sqlite_file import damaged, is_damage, loads_column, make_private
from engram.store.sqlite_schema import SCHEMA, claims_table, commit_log, linked_column, write_ahead_log

EMPTY = (None, "", "{}")  # metadata columns that hold no metadata (read without a JSON parse)
INCREMENTAL = 2  # PRAGMA auto_vacuum: free pages are given back by `PRAGMA incremental_vacuum`

__all__ = ["ColumnLookup", "ExtractionRow", "PassageRow", "RecordStore"]

class RecordStore:
    """The directory backend of `engram.store.base.Store`."""

    shared = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self._closed = False
        self.location = str(path)
        self._lock = threading.RLock()
        make_private(path)
        try:
            self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise damaged(path, exc) from exc
        try:
            self._db.execute(f"PRAGMA auto_vacuum={INCREMENTAL}")  # takes effect in a new file only
            write_ahead_log(self._db)
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(SCHEMA)
            commit_log(self._db)
            claims_table(self._db)
            self._linked = "linked" if linked_column(self._db) else "1"
            migrate(self._db, path)
        except sqlite3.Error as exc:
            self._db.close()
            if is_damage(exc):
                raise damaged(path, exc) from exc
            raise
        except MemoryFormatError:
            self._db.close()
            raise

    def close(self) -> None:
        self._closed = True
        self._db.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InputError(f"the memory at {self.path.parent} is closed: open it again (Memory(path)) to use it")

    @contextmanager
    def turn(self) -> Iterator[None]:
        """The write turn of the store contract; a directory has none yet (each transaction takes SQLite's write
        lock; a writer that lost the race for a generation retries with backoff, engram.index.live.retry)."""
        yield

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction. The connection is shared by threads (LLM workers cache responses while the
        main thread commits extractions), so transactions and reads are serialised by a lock."""
        with self._lock:
            self._check_open()
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                if is_damage(exc):
                    raise damaged(self.path, exc) from exc
                raise

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            self._check_open()
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                if is_damage(exc):
                    raise damaged(self.path, exc) from exc
                raise

    def _read_keyed(self, sql: str, keys: Sequence[str], params: tuple[Any, ...] = ()) -> list[Any]:
        """The rows of `sql` for every key: `{marks}` in it stands for the placeholders of up to 500 keys at a time,
        bound after `params`."""
        rows: list[Any] = []
        for start in range(0, len(keys), 500):
            part = tuple(keys[start : start + 500])
            rows.extend(self._read(sql.format(marks=",".join("?" * len(part))), (*params, *part)))
        return rows

    # meta -----------------------------------------------------------------------------------------------
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        row = rows[0] if rows else None
        return str(row[0]) if row else default

    def set_meta(self, db: sqlite3.Connection, key: str, value: str) -> None:
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    @property
    def generation(self) -> int:
        return parse_generation(self.get_meta("generation"), str(self.path))

    def locked_generation(self, db: sqlite3.Connection) -> int:
        """The generation inside a transaction (BEGIN IMMEDIATE already holds the write lock)."""
        return self.generation

    # documents and passages ---------------------------------------------------------------------------
    def document_hashes(self) -> dict[str, str]:
        return dict(self._read("SELECT id, content_hash FROM documents"))

    def document_metadata(self) -> dict[str, dict[str, Any]]:
        return {i: loads_column(m, self.path) for i, m in self._read("SELECT id, metadata FROM documents")}

    def document_lookup(self) -> ColumnLookup:
        """doc id -> content hash, queried per key."""
        return ColumnLookup(self._read, "?", "documents", "id", "content_hash")

    def document_metadata_lookup(self) -> ColumnLookup:
        """doc id -> its metadata (JSON text), queried per key."""
        return ColumnLookup(self._read, "?", "documents", "id", "metadata")

    def passage_lookup(self) -> ColumnLookup:
        """passage id -> content hash, queried per key (membership tells whether an id is taken)."""
        return ColumnLookup(self._read, "?", "passages", "id", "content_hash")

    def passage_ids(self) -> set[str]:
        return {str(r[0]) for r in self._read("SELECT id FROM passages")}

    def add_document(
        self, db: sqlite3.Connection, doc_id: str, title: str | None, metadata: dict[str, Any], digest: str
    ) -> None:
        db.execute(
            "INSERT OR REPLACE INTO documents (id, title, metadata, content_hash, added) VALUES (?, ?, ?, ?, ?)",
            (doc_id, title, json.dumps(metadata, ensure_ascii=False, sort_keys=True), digest, time.time()),
        )

    def add_chunk(self, db: sqlite3.Connection, doc_id: str, idx: int, passage_id: str) -> None:
        db.execute(
            "INSERT OR REPLACE INTO chunks (doc_id, idx, passage_id) VALUES (?, ?, ?)", (doc_id, idx, passage_id)
        )

    def add_passage(self, db: sqlite3.Connection, row: PassageRow) -> None:
        db.execute(
            "INSERT INTO passages (id, doc_id, title, text, content_hash) VALUES (?, ?, ?, ?, ?)",
            (row.id, row.doc_id, row.title, row.text, row.content_hash),
        )

    def passages(self) -> list[PassageRow]:
        """All passages ordered by id, with their document's metadata."""
        query = (
            "SELECT p.id, p.doc_id, p.title, p.text, p.content_hash, d.metadata FROM passages p "
            "LEFT JOIN documents d ON d.id = p.doc_id ORDER BY p.id"
        )
        rows = self._read(query)
        path = self.path
        return [PassageRow(i, d, t, x, h, {} if m in EMPTY else loads_column(m, path)) for i, d, t, x, h, m in rows]

    def counts(self) -> dict[str, int]:
        out = {}
        for table in ("documents", "passages", "llm_cache"):
            out[table] = int(self._read(f"SELECT COUNT(*) FROM {table}")[0][0])
        return out

    def dangling_rows(self) -> list[str]:
        return [what.format(a, b) for what, sql in DANGLING for a, b in self._read(sql + " LIMIT 3")]

    # extractions ----------------------------------------------------------------------------------------
    def extractions(self) -> dict[str, ExtractionRow]:
        rows = self._read(
            f"SELECT content_hash, status, entities, triples, error, source, {self._linked}, attempts FROM extractions"
        )
        return self._extraction_rows(rows)

    def _extraction_rows(self, rows: list[Any]) -> dict[str, ExtractionRow]:
        path = self.path
        return {
            h: ExtractionRow(st, loads_column(e, path), loads_column(t, path), err, src, bool(ln), int(n))
            for h, st, e, t, err, src, ln, n in rows
        }

    def link_extractions(self, db: sqlite3.Connection, rows: Mapping[str, ExtractionRow]) -> None:
        """Mark the versions of `rows` read by a commit as in the graph (inside that commit's transaction)."""
        db.executemany(
            "UPDATE extractions SET linked = 1 WHERE content_hash = ? AND attempts = ? AND linked = 0",
            ((h, row.attempts) for h, row in rows.items() if not row.linked),
        )

    def put_extractions(
        self,
        rows: Iterable[tuple[str, Sequence[str], Sequence[Sequence[Any]], int]],
        source: str,
        claim: str | None = None,
    ) -> None:
        """Record finished extractions (content hash, entities, triples, dropped count) in one transaction,
        committed at once; with `claim`, that worker's claims on them are released in the same transaction."""
        now = time.time()
        rows = list(rows)
        with self.transaction() as db:
            if claim is not None:
                db.executemany(
                    "DELETE FROM claims WHERE worker = ? AND content_hash = ?", ((claim, row[0]) for row in rows)
                )
            db.executemany(
                "INSERT OR REPLACE INTO extractions (content_hash, status, entities, triples, dropped, source, "
                "error, attempts, updated, linked) VALUES (?, 'done', ?, ?, ?, ?, NULL, "
                "COALESCE((SELECT attempts FROM extractions WHERE content_hash = ?), 0) + 1, ?, 0)",
                (
                    (
                        digest,
                        json.dumps(list(entities), ensure_ascii=False),
                        json.dumps([list(t) for t in triples], ensure_ascii=False),
                        dropped,
                        source,
                        digest,
                        now,
                    )
                    for digest, entities, triples, dropped in rows
                ),
            )

    def put_failure(self, digest: str, error: str, source: str, claim: str | None = None) -> None:
        """Record a failed extraction; it is retried on the next run, never taken as empty. With `claim`, that
        worker's claim on it is released in the same transaction."""
        with self.transaction() as db:
            if claim is not None:
                db.execute("DELETE FROM claims WHERE worker = ? AND content_hash = ?", (claim, digest))
            db.execute(
                "INSERT OR REPLACE INTO extractions (content_hash, status, entities, triples, dropped, source, "
                "error, attempts, updated, linked) VALUES (?, 'failed', '[]', '[]', 0, ?, ?, "
                "COALESCE((SELECT attempts FROM extractions WHERE content_hash = ?), 0) + 1, ?, 0)",
                (digest, source, error, digest, time.time()),
            )

    # claims on extraction work (docs/format.md, "claims") -----------------------------------------------
    def claim_extractions(
        self, worker: str, wanted: Sequence[tuple[str, int]], limit: int, lease: float
    ) -> Claimed:
        """Lease to `worker`, for `lease` seconds, up to `limit` of the `wanted` (content hash, attempts the
        worker saw) whose extraction row is still as the worker saw it and that no other worker holds an
        unexpired lease on. One `BEGIN IMMEDIATE` transaction: claimers of all processes take turns."""
        hashes = [h for h, _ in wanted]
        taken: list[str] = []
        gone: list[str] = []
        held: dict[str, tuple[str, float]] = {}
        with self.transaction() as db:
            now = time.time()
            leases = {
                str(h): (str(w), float(e))
                for h, w, e in self._read_keyed(
                    "SELECT content_hash, worker, expires FROM claims WHERE content_hash IN ({marks})", hashes
                )
            }
            attempts = {
                str(h): int(n)
                for h, n in self._read_keyed(
                    "SELECT content_hash, attempts FROM extractions WHERE content_hash IN ({marks})", hashes
                )
            }
            for digest, seen in wanted:
                lease_of = leases.get(digest)
                if attempts.get(digest, 0) != seen:
                    gone.append(digest)
                elif lease_of is not None and lease_of[0] != worker and lease_of[1] > now:
                    held[digest] = (lease_of[0], lease_of[1] - now)
                elif len(taken) < limit:
                    taken.append(digest)
            db.executemany(
                "INSERT OR REPLACE INTO claims (content_hash, worker, expires) VALUES (?, ?, ?)",
                ((digest, worker, now + lease) for digest in taken),
            )
            stale = [d for d in gone if d in leases and (leases[d][1] <= now or leases[d][0] == worker)]
            db.executemany("DELETE FROM claims WHERE content_hash = ?", ((d,) for d in stale))
        return Claimed(taken, gone, held)

    def renew_claims(self, worker: str, hashes: Sequence[str], lease: float) -> None:
        """Extend `worker`'s leases on `hashes` to `lease` seconds from now (a lease taken over meanwhile stays
        the other worker's)."""
        expires = time.time() + lease
        with self.transaction() as db:
            db.executemany(
                "UPDATE claims SET expires = ? WHERE worker = ? AND content_hash = ?",
                ((expires, worker, digest) for digest in hashes),
            )

    def release_claims(self, worker: str, hashes: Sequence[str] | None = None) -> None:
        """Drop `worker`'s claims on `hashes` (None: all of its claims)."""
        with self.transaction() as db:
            if hashes is None:
                db.execute("DELETE FROM claims WHERE worker = ?", (worker,))
            else:
                db.executemany(
                    "DELETE FROM claims WHERE worker = ? AND content_hash = ?", ((worker, d) for d in hashes)
                )

    # embedding cache ------------------------------------------------------------------------------------
    def put_vectors(self, model: str, role: str, hashes: Iterable[str], vectors: npt.NDArray[np.float32]) -> None:
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO embeddings (model, role, text_hash, vector) VALUES (?, ?, ?, ?)",
                (
                    (model, role, h, np.ascontiguousarray(v, dtype=np.float32).tobytes())
                    for h, v in zip(hashes, vectors)
                ),
            )

    def drop_vectors(self, model: str, role: str, hashes: Iterable[str]) -> None:
        """Delete the rows, then hand the freed pages back to the file system where the file allows it
        (`auto_vacuum` incremental, which new memories take; an older file keeps them for later rows)."""
        with self.transaction() as db:
            db.executemany(
                "DELETE FROM embeddings WHERE model = ? AND role = ? AND text_hash = ?",
                ((model, role, h) for h in sorted(hashes)),  # in key order: the B-tree pages in turn
            )
        with self._lock:
            self._check_open()
            try:
                if int(self._db.execute("PRAGMA auto_vacuum").fetchone()[0]) == INCREMENTAL:
                    self._db.executescript("PRAGMA incremental_vacuum;")  # execute() frees one page per call
            except sqlite3.Error as exc:
                if is_damage(exc):
                    raise damaged(self.path, exc) from exc
                raise

    # deletion -----------------------------------------------------------------------------------------
    def chunk_passages(self, doc_ids: Sequence[str]) -> dict[str, list[str]]:
        """doc id -> its passage ids (chunk order), for the given documents."""
        out: dict[str, list[str]] = {}
        for start in range(0, len(doc_ids), 500):
            part = list(doc_ids[start : start + 500])
            marks = ",".join("?" * len(part))
            for doc, pid in self._read(
                f"SELECT doc_id, passage_id FROM chunks WHERE doc_id IN ({marks}) ORDER BY doc_id, idx", tuple(part)
            ):
                out.setdefault(doc, []).append(pid)
        return out

    def delete_documents(self, db: sqlite3.Connection, doc_ids: Sequence[str], passage_ids: Sequence[str]) -> None:
        """Remove documents, their chunks and the given (no longer used) passages. Extractions and embeddings
        stay: they are caches keyed by content, so re-adding the same text costs nothing."""
        db.executemany("DELETE FROM chunks WHERE doc_id = ?", ((d,) for d in doc_ids))
        db.executemany("DELETE FROM documents WHERE id = ?", ((d,) for d in doc_ids))
        db.executemany("DELETE FROM passages WHERE id = ?", ((p,) for p in passage_ids))

    # synonym lists ------------------------------------------------------------------------------------
    def synonym_lists(self) -> dict[str, list[tuple[str, float]]]:
        out: dict[str, list[tuple[str, float]]] = {}
        for phrase, neighbour, sim in self._read("SELECT phrase, neighbour, sim FROM synonyms"):
            out.setdefault(phrase, []).append((neighbour, float(sim)))
        return out

    def write_synonyms(self, db: sqlite3.Connection, lists: dict[str, list[tuple[str, float]]]) -> None:
        """Replace the lists of the given phrases (an empty list removes the phrase's rows)."""
        db.executemany("DELETE FROM synonyms WHERE phrase = ?", ((p,) for p in lists))
        db.executemany(
            "INSERT INTO synonyms (phrase, neighbour, sim) VALUES (?, ?, ?)",
            ((p, n, s) for p, items in lists.items() for n, s in items),
        )

    def synonym_lists_for(self, phrases: Sequence[str]) -> dict[str, list[tuple[str, float]]]:
        out: dict[str, list[tuple[str, float]]] = {}
        for phrase, neighbour, sim in self._read_keyed(
            "SELECT phrase, neighbour, sim FROM synonyms WHERE phrase IN ({marks})", phrases
        ):
            out.setdefault(phrase, []).append((neighbour, float(sim)))
        return out

    # the commit log ---------------------------------------------------------------------------------------
    def log_change(self, db: sqlite3.Connection, generation: int, change: str) -> None:
        # replaces a row of that number left by records rolled back (a restored copy): the log follows the records
        db.execute("INSERT OR REPLACE INTO commits (generation, change) VALUES (?, ?)", (generation, change))
        db.execute("DELETE FROM commits WHERE generation <= ?", (generation - LOG_KEPT,))

    def changes_since(self, generation: int, latest: int) -> list[tuple[int, str]]:
        try:
            rows = self._read(
                "SELECT generation, change FROM commits WHERE generation > ? AND generation <= ? ORDER BY generation",
                (generation, latest),
            )
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return []  # a read-only file from before the log
        return [(int(g), str(change)) for g, change in rows]

    # lookups by key -----------------------------------------------------------------------------------
    def vectors_for(self, model: str, role: str, hashes: Sequence[str]) -> dict[str, bytes]:
        sql = "SELECT text_hash, vector FROM embeddings WHERE model = ? AND role = ? AND text_hash IN ({marks})"
        return {h: bytes(v) for h, v in self._read_keyed(sql, hashes, (model, role))}

    def passages_by_id(self, ids: Sequence[str]) -> list[PassageRow]:
        rows = self._read_keyed(
            "SELECT p.id, p.doc_id, p.title, p.text, p.content_hash, d.metadata FROM passages p "
            "LEFT JOIN documents d ON d.id = p.doc_id WHERE p.id IN ({marks})",
            ids,
        )
        path = self.path
        out = [PassageRow(i, d, t, x, h, {} if m in EMPTY else loads_column(m, path)) for i, d, t, x, h, m in rows]
        return sorted(out, key=lambda row: row.id.encode("utf-8"))

    def extractions_for(self, hashes: Sequence[str]) -> dict[str, ExtractionRow]:
        rows = self._read_keyed(
            f"SELECT content_hash, status, entities, triples, error, source, {self._linked}, attempts "
            "FROM extractions WHERE content_hash IN ({marks})",
            hashes,
        )
        return self._extraction_rows(rows)

    # LLM response cache ---------------------------------------------------------------------------------
    def cached_response(self, key: str) -> str | None:
        rows = self._read("SELECT response FROM llm_cache WHERE key = ?", (key,))
        row = rows[0] if rows else None
        return str(row[0]) if row else None

    def put_response(self, key: str, model: str, response: str) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO llm_cache (key, model, response, created) VALUES (?, ?, ?, ?)",
                (key, model, response, time.time()),
            )

    # LLM accounting -------------------------------------------------------------------------------------
    _USAGE_COLUMNS = ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "retries", "failures")

    def add_llm_usage(self, model: str, amounts: dict[str, int]) -> None:
        """Add counts (see `engram.llm.usage.LLMUsage`) to a model's running totals, atomically: totals of
        several processes add up."""
        values = [int(amounts.get(c, 0)) for c in self._USAGE_COLUMNS]
        columns = ", ".join(self._USAGE_COLUMNS)
        updates = ", ".join(f"{c} = {c} + excluded.{c}" for c in self._USAGE_COLUMNS)
        with self.transaction() as db:
            db.execute(
                f"INSERT INTO llm_usage (model, {columns}, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                f"ON CONFLICT (model) DO UPDATE SET {updates}, updated = excluded.updated",
                (model, *values, time.time()),
            )

    def llm_usage(self) -> dict[str, dict[str, int]]:
        """model identity -> its totals."""
        columns = ", ".join(self._USAGE_COLUMNS)
        rows = self._read(f"SELECT model, {columns} FROM llm_usage ORDER BY model")
        return {str(row[0]): dict(zip(self._USAGE_COLUMNS, map(int, row[1:]))) for row in rows}
