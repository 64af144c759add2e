"""PostgreSQL + pgvector backend of the store contract (`engram.store.base.Store`): one schema per memory,
shared by any number of engram processes on any number of machines.

Same tables and meaning as the SQLite records (docs/format.md); vectors are pgvector `vector` columns, written
and read in pgvector's binary form (the float32 values come back bit for bit). A commit takes the
generation row `FOR UPDATE` inside its transaction, so two writers never commit on the same generation: the
second waits, then sees the new generation and gets `ConflictError` (the writer then reloads and retries).
Needs `engram[postgres]` (psycopg 3).
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.errors import MemoryFormatError, MissingDependencyError
from engram.store.base import DANGLING, LOG_KEPT
from engram.store.pg_schema import connect, prepare_schema, redact, split_url
from engram.store.rows import Claimed, ColumnLookup, ExtractionRow, PassageRow, parse_generation

TURN_CLASS = 0x656E67  # the first key of the write turn's advisory lock (the second: the schema's hash)

try:
    from psycopg.adapt import Dumper
    from psycopg.pq import Format
except ImportError as exc:
    raise MissingDependencyError("a postgresql:// memory needs psycopg: pip install 'engram[postgres]'") from exc

__all__ = ["PostgresStore"]

_USAGE_COLUMNS = ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "retries", "failures")
_EXTRACTION_UPSERT = (
    "INSERT INTO extractions (content_hash, status, entities, triples, dropped, source, error, attempts, updated, "
    "linked) VALUES (%s, %s, %s, %s, %s, %s, %s, 1, %s, FALSE) ON CONFLICT (content_hash) DO UPDATE SET "
    "status = excluded.status, entities = excluded.entities, triples = excluded.triples, dropped = excluded.dropped, "
    "source = excluded.source, error = excluded.error, attempts = extractions.attempts + 1, "
    "updated = excluded.updated, linked = FALSE"
)


class _VectorDumper(Dumper):
    """A float32 array as pgvector's binary form: dimension and a reserved word (uint16 each), then big-endian
    float4 values. Bound to the connection's `vector` type oid by `_bind_vectors`."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        values = np.asarray(obj, dtype=">f4")
        return struct.pack(">HH", len(values), 0) + values.tobytes()


def vector_bytes(data: bytes) -> bytes:
    """pgvector's binary form as native float32 bytes (what the SQLite store keeps)."""
    dim = struct.unpack_from(">H", data)[0]
    return np.frombuffer(data, dtype=">f4", count=dim, offset=4).astype(np.float32).tobytes()


def vectors_bytes(rows: Sequence[bytes]) -> list[bytes]:
    """`vector_bytes` of many rows at once: when all have one dimension, their 4-byte headers are one float4
    column of the joined buffer, dropped in one step."""
    if not rows or len({len(r) for r in rows}) != 1:
        return [vector_bytes(r) for r in rows]
    matrix = np.frombuffer(b"".join(rows), dtype=">f4").reshape(len(rows), -1)[:, 1:].astype(np.float32)
    return [row.tobytes() for row in matrix]


def _bind_vectors(conn: Any) -> None:
    oid = int(conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])
    dumper = type("VectorDumper", (_VectorDumper,), {"oid": oid})
    conn.adapters.register_dumper(np.ndarray, dumper)


class PostgresStore:
    """A memory in schema `?schema=NAME` (default "engram") of the database at `url`. One connection; threads
    take turns on it (like the SQLite store)."""

    shared = True

    def __init__(self, url: str, identity: dict[str, Any], create: bool = True) -> None:
        self.url = url
        self.location = redact(url)
        self.schema = split_url(url)[1]
        self._lock = threading.RLock()
        self._identity = identity
        self._conn = self._connect(create)
        self._turn_held = False  # this store holds the memory's write turn (`turn`): its commits skip the wait
        # claims and lease renewals go on a connection of their own: they never wait for the write turn, nor for
        # this process's commit that waits for it (a worker whose leases lapsed there would lose its passages)
        self._claims_lock = threading.Lock()
        self._claims_conn: Any = None

    def _connect(self, create: bool) -> Any:
        conn = connect(self.url)
        try:
            prepare_schema(conn, self.url, self.schema, self._identity, create)
            _bind_vectors(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection(self) -> Any:
        """The open connection; a new one when the old was lost (a server restart or a network cut fails the
        call that met it, and the next call reconnects)."""
        if self._conn.closed:
            self._conn = self._connect(create=False)
        return self._conn

    def close(self) -> None:
        self._conn.close()
        with self._claims_lock:
            if self._claims_conn is not None:
                self._claims_conn.close()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A write transaction; it first waits while another process holds the memory's write turn."""
        with self._lock:
            conn = self._connection()
            with conn.transaction(), conn.pipeline():  # statements are sent without waiting for each reply
                if not self._turn_held:
                    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (TURN_CLASS, self.schema))
                yield conn

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the memory's write turn: a session advisory lock, on a connection of its own, that every other
        process's commit waits for (`transaction`). A writer that lost the race for a generation takes it for
        its next attempt, so that attempt cannot lose again however often the others commit. The caller
        keeps this process's other writers out meanwhile (the live index's turn lock)."""
        conn = connect(self.url)
        try:
            conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (TURN_CLASS, self.schema))
            self._turn_held = True
            try:
                yield
            finally:
                self._turn_held = False
        finally:
            conn.close()  # ends the session: the lock goes with it

    def _read(self, sql: str, params: Sequence[Any] = (), binary: bool = False) -> list[Any]:
        with self._lock:
            return list(self._connection().execute(sql, params, binary=binary).fetchall())

    def _json(self, text: Any) -> Any:
        try:
            return json.loads(text)
        except (TypeError, ValueError, RecursionError) as exc:
            raise MemoryFormatError(f"{self.location} holds a JSON column that cannot be read ({exc})") from exc

    @staticmethod
    def _many(db: Any, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with db.cursor() as cur:
            cur.executemany(sql, list(rows))

    # meta -----------------------------------------------------------------------------------------------
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = %s", (key,))
        return str(rows[0][0]) if rows else default

    def set_meta(self, db: Any, key: str, value: str) -> None:
        db.execute(
            "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    @property
    def generation(self) -> int:
        return parse_generation(self.get_meta("generation"), self.location)

    def locked_generation(self, db: Any) -> int:
        row = db.execute("SELECT value FROM meta WHERE key = 'generation' FOR UPDATE").fetchone()
        return parse_generation(row[0] if row else None, self.location)

    # documents and passages ---------------------------------------------------------------------------
    def document_hashes(self) -> dict[str, str]:
        return {str(i): str(h) for i, h in self._read("SELECT id, content_hash FROM documents")}

    def document_metadata(self) -> dict[str, dict[str, Any]]:
        return {str(i): self._json(m) for i, m in self._read("SELECT id, metadata FROM documents")}

    def document_lookup(self) -> ColumnLookup:
        return ColumnLookup(self._read, "%s", "documents", "id", "content_hash")

    def document_metadata_lookup(self) -> ColumnLookup:
        return ColumnLookup(self._read, "%s", "documents", "id", "metadata")

    def passage_lookup(self) -> ColumnLookup:
        return ColumnLookup(self._read, "%s", "passages", "id", "content_hash")

    def passage_ids(self) -> set[str]:
        return {str(r[0]) for r in self._read("SELECT id FROM passages")}

    def add_document(self, db: Any, doc_id: str, title: str | None, metadata: dict[str, Any], digest: str) -> None:
        db.execute(
            "INSERT INTO documents (id, title, metadata, content_hash, added) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET title = excluded.title, metadata = excluded.metadata, "
            "content_hash = excluded.content_hash, added = excluded.added",
            (doc_id, title, json.dumps(metadata, ensure_ascii=False, sort_keys=True), digest, time.time()),
        )

    def add_chunk(self, db: Any, doc_id: str, idx: int, passage_id: str) -> None:
        db.execute(
            "INSERT INTO chunks (doc_id, idx, passage_id) VALUES (%s, %s, %s) "
            "ON CONFLICT (doc_id, idx) DO UPDATE SET passage_id = excluded.passage_id",
            (doc_id, idx, passage_id),
        )

    def add_passage(self, db: Any, row: PassageRow) -> None:
        db.execute(
            "INSERT INTO passages (id, doc_id, title, text, content_hash) VALUES (%s, %s, %s, %s, %s)",
            (row.id, row.doc_id, row.title, row.text, row.content_hash),
        )

    def passages(self) -> list[PassageRow]:
        """All passages ordered by id (byte order, as SQLite orders them), with their document's metadata."""
        rows = self._read(
            "SELECT p.id, p.doc_id, p.title, p.text, p.content_hash, d.metadata FROM passages p "
            'LEFT JOIN documents d ON d.id = p.doc_id ORDER BY p.id COLLATE "C"'
        )
        return [PassageRow(i, d, t, x, h, self._json(m) if m else {}) for i, d, t, x, h, m in rows]

    def passages_by_id(self, ids: Sequence[str]) -> list[PassageRow]:
        rows = self._read(
            "SELECT p.id, p.doc_id, p.title, p.text, p.content_hash, d.metadata FROM passages p "
            'LEFT JOIN documents d ON d.id = p.doc_id WHERE p.id = ANY(%s) ORDER BY p.id COLLATE "C"',
            (list(ids),),
        )
        return [PassageRow(i, d, t, x, h, self._json(m) if m else {}) for i, d, t, x, h, m in rows]

    def counts(self) -> dict[str, int]:
        return {t: int(self._read(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in ("documents", "passages", "llm_cache")}

    def chunk_passages(self, doc_ids: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        rows = self._read(
            "SELECT doc_id, passage_id FROM chunks WHERE doc_id = ANY(%s) ORDER BY doc_id, idx", (list(doc_ids),)
        )
        for doc, pid in rows:
            out.setdefault(str(doc), []).append(str(pid))
        return out

    def delete_documents(self, db: Any, doc_ids: Sequence[str], passage_ids: Sequence[str]) -> None:
        db.execute("DELETE FROM chunks WHERE doc_id = ANY(%s)", (list(doc_ids),))
        db.execute("DELETE FROM documents WHERE id = ANY(%s)", (list(doc_ids),))
        db.execute("DELETE FROM passages WHERE id = ANY(%s)", (list(passage_ids),))

    def dangling_rows(self) -> list[str]:
        return [what.format(a, b) for what, sql in DANGLING for a, b in self._read(sql + " LIMIT 3")]

    # extractions ----------------------------------------------------------------------------------------
    def _extraction_rows(self, where: str = "", params: Sequence[Any] = ()) -> dict[str, ExtractionRow]:
        rows = self._read(
            f"SELECT content_hash, status, entities, triples, error, source, linked, attempts FROM extractions{where}",
            params,
        )
        return {
            str(h): ExtractionRow(str(s), self._json(e), self._json(t), err, str(src), bool(ln), int(n))
            for h, s, e, t, err, src, ln, n in rows
        }

    def link_extractions(self, db: Any, rows: Mapping[str, ExtractionRow]) -> None:
        """Mark the versions of `rows` read by a commit as in the graph (inside that commit's transaction)."""
        todo = sorted((h, row.attempts) for h, row in rows.items() if not row.linked)
        if todo:
            self._many(
                db,
                "UPDATE extractions SET linked = TRUE WHERE content_hash = %s AND attempts = %s AND NOT linked",
                todo,
            )

    def extractions(self) -> dict[str, ExtractionRow]:
        return self._extraction_rows()

    def extractions_for(self, hashes: Sequence[str]) -> dict[str, ExtractionRow]:
        return self._extraction_rows(" WHERE content_hash = ANY(%s)", (list(hashes),))

    def put_extractions(
        self,
        rows: Iterable[tuple[str, Sequence[str], Sequence[Sequence[Any]], int]],
        source: str,
        claim: str | None = None,
    ) -> None:
        now = time.time()
        values = {
            digest: (
                digest,
                "done",
                json.dumps(list(entities), ensure_ascii=False),
                json.dumps([list(t) for t in triples], ensure_ascii=False),
                dropped,
                source,
                None,
                now,
            )
            for digest, entities, triples, dropped in rows
        }
        with self.transaction() as db:  # in key order: concurrent writers lock rows in one order
            self._many(db, _EXTRACTION_UPSERT, [values[k] for k in sorted(values)])
            if claim is not None:
                db.execute("DELETE FROM claims WHERE worker = %s AND content_hash = ANY(%s)", (claim, sorted(values)))

    def put_failure(self, digest: str, error: str, source: str, claim: str | None = None) -> None:
        with self.transaction() as db:
            db.execute(_EXTRACTION_UPSERT, (digest, "failed", "[]", "[]", 0, source, error, time.time()))
            if claim is not None:
                db.execute("DELETE FROM claims WHERE worker = %s AND content_hash = %s", (claim, digest))

    # claims on extraction work (docs/format.md, "claims") -----------------------------------------------
    @contextmanager
    def _claiming(self) -> Iterator[Any]:
        """A transaction on the claims connection (opened on first use; reopened when it was lost)."""
        with self._claims_lock:
            if self._claims_conn is None or self._claims_conn.closed:
                self._claims_conn = self._connect(create=False)
            with self._claims_conn.transaction():
                yield self._claims_conn

    def claim_extractions(self, worker: str, wanted: Sequence[tuple[str, int]], limit: int, lease: float) -> Claimed:
        """Lease to `worker` up to `limit` of the `wanted` (content hash, attempts the worker saw) whose
        extraction is still as the worker saw it and that no other worker holds an unexpired lease on. Expired
        leases are taken with `SELECT ... FOR UPDATE SKIP LOCKED` (a row another claimer is taking this moment
        is skipped, not waited for), unclaimed hashes with `INSERT ... ON CONFLICT DO NOTHING`; the attempts are
        read again once the rows are ours, so a passage finished (and released) meanwhile is given up. Times are
        the database server's clock, so the workers' clocks need not agree."""
        seen = dict(wanted)
        with self._claiming() as db:
            now = float(db.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])
            gone = set(self._changed(db, seen))
            want = sorted(h for h in seen if h not in gone)
            expired = [
                str(r[0])
                for r in db.execute(
                    "SELECT content_hash FROM claims WHERE content_hash = ANY(%s) AND expires <= %s "
                    "ORDER BY content_hash LIMIT %s FOR UPDATE SKIP LOCKED",
                    (want, now, limit),
                ).fetchall()
            ]
            if expired:
                db.execute(
                    "UPDATE claims SET worker = %s, expires = %s WHERE content_hash = ANY(%s)",
                    (worker, now + lease, expired),
                )
            fresh: list[str] = []
            if len(expired) < limit:
                fresh = [
                    str(r[0])
                    for r in db.execute(
                        "INSERT INTO claims (content_hash, worker, expires) SELECT h, %s, %s FROM unnest(%s::text[]) "
                        "AS h WHERE NOT EXISTS (SELECT 1 FROM claims c WHERE c.content_hash = h) ORDER BY h LIMIT %s "
                        "ON CONFLICT (content_hash) DO NOTHING RETURNING content_hash",
                        (worker, now + lease, want, limit - len(expired)),
                    ).fetchall()
                ]
            taken = expired + fresh
            late = set(self._changed(db, {h: seen[h] for h in taken}))  # finished and released meanwhile
            if late:
                db.execute("DELETE FROM claims WHERE worker = %s AND content_hash = ANY(%s)", (worker, sorted(late)))
            gone |= late
            db.execute(  # lapsed leases of gone passages (a killed worker finished them); rows others lock: theirs
                "DELETE FROM claims WHERE content_hash IN (SELECT content_hash FROM claims WHERE content_hash = "
                "ANY(%s) AND expires <= %s FOR UPDATE SKIP LOCKED)",
                (sorted(gone), now),
            )
            mine = set(taken)
            rest = [h for h in want if h not in mine]
            held = {
                str(h): (str(w), float(e) - now)
                for h, w, e in db.execute(
                    "SELECT content_hash, worker, expires FROM claims WHERE content_hash = ANY(%s) "
                    "AND worker <> %s AND expires > %s",
                    (rest, worker, now),
                ).fetchall()
            }
        order = {h: i for i, (h, _) in enumerate(wanted)}
        return Claimed(
            sorted((h for h in taken if h not in late), key=order.__getitem__),
            sorted(gone, key=order.__getitem__),
            held,
        )

    @staticmethod
    def _changed(db: Any, seen: Mapping[str, int]) -> list[str]:
        """The hashes of `seen` whose extraction row's attempts are no longer the ones seen (no row: 0)."""
        rows = db.execute(
            "SELECT content_hash, attempts FROM extractions WHERE content_hash = ANY(%s)", (list(seen),)
        ).fetchall()
        attempts = {str(h): int(n) for h, n in rows}
        return [h for h, n in seen.items() if attempts.get(h, 0) != n]

    def renew_claims(self, worker: str, hashes: Sequence[str], lease: float) -> None:
        with self._claiming() as db:
            db.execute(
                "UPDATE claims SET expires = extract(epoch FROM clock_timestamp()) + %s "
                "WHERE worker = %s AND content_hash = ANY(%s)",
                (lease, worker, sorted(hashes)),
            )

    def release_claims(self, worker: str, hashes: Sequence[str] | None = None) -> None:
        with self._claiming() as db:
            if hashes is None:
                db.execute("DELETE FROM claims WHERE worker = %s", (worker,))
            else:
                db.execute("DELETE FROM claims WHERE worker = %s AND content_hash = ANY(%s)", (worker, sorted(hashes)))

    # embeddings -----------------------------------------------------------------------------------------
    def put_vectors(self, model: str, role: str, hashes: Iterable[str], vectors: npt.NDArray[np.float32]) -> None:
        rows = sorted(zip(hashes, vectors), key=lambda row: row[0])
        with self.transaction() as db:
            self._many(
                db,
                "INSERT INTO embeddings (model, role, text_hash, vector) VALUES (%s, %s, %s, %b) "
                "ON CONFLICT (model, role, text_hash) DO UPDATE SET vector = excluded.vector",
                [(model, role, h, np.asarray(v, dtype=np.float32)) for h, v in rows],
            )

    def drop_vectors(self, model: str, role: str, hashes: Iterable[str]) -> None:
        with self.transaction() as db:
            db.execute(
                "DELETE FROM embeddings WHERE model = %s AND role = %s AND text_hash = ANY(%s)",
                (model, role, sorted(hashes)),
            )

    def vectors_for(self, model: str, role: str, hashes: Sequence[str]) -> dict[str, bytes]:
        # one string the server splits: binding thousands of array items one by one costs more than the lookup
        keys: str | list[str] = ",".join(hashes)
        where = "ANY(string_to_array(%s, ','))"
        if any("," in h for h in hashes):  # not a hash: bound as an array
            where, keys = "ANY(%s)", list(hashes)
        rows = self._read(
            f"SELECT text_hash, vector FROM embeddings WHERE model = %s AND role = %s AND text_hash = {where}",
            (model, role, keys),
            binary=True,
        )
        return dict(zip([str(r[0]) for r in rows], vectors_bytes([bytes(r[1]) for r in rows])))

    # synonym lists ------------------------------------------------------------------------------------
    def synonym_lists(self) -> dict[str, list[tuple[str, float]]]:
        out: dict[str, list[tuple[str, float]]] = {}
        for phrase, neighbour, sim in self._read("SELECT phrase, neighbour, sim FROM synonyms"):
            out.setdefault(str(phrase), []).append((str(neighbour), float(sim)))
        return out

    def write_synonyms(self, db: Any, lists: dict[str, list[tuple[str, float]]]) -> None:
        db.execute("DELETE FROM synonyms WHERE phrase = ANY(%s)", (sorted(lists),))
        rows = sorted((p, n, s) for p, items in lists.items() for n, s in items)
        if rows:  # (COPY would be faster, but cannot run inside the transaction's pipeline)
            self._many(db, "INSERT INTO synonyms (phrase, neighbour, sim) VALUES (%s, %s, %s)", rows)

    def synonym_lists_for(self, phrases: Sequence[str]) -> dict[str, list[tuple[str, float]]]:
        out: dict[str, list[tuple[str, float]]] = {}
        for phrase, neighbour, sim in self._read(
            "SELECT phrase, neighbour, sim FROM synonyms WHERE phrase = ANY(%s)", (list(phrases),)
        ):
            out.setdefault(str(phrase), []).append((str(neighbour), float(sim)))
        return out

    # the commit log ---------------------------------------------------------------------------------------
    def log_change(self, db: Any, generation: int, change: str) -> None:
        """Log `generation`'s change and drop the entries `LOG_KEPT` generations older (a process that far behind
        reloads everything)."""
        db.execute(  # replaces a row of that number left by records rolled back (a restored backup)
            "INSERT INTO commits (generation, change) VALUES (%s, %s) "
            "ON CONFLICT (generation) DO UPDATE SET change = excluded.change",
            (generation, change),
        )
        db.execute("DELETE FROM commits WHERE generation <= %s", (generation - LOG_KEPT,))

    def changes_since(self, generation: int, latest: int) -> list[tuple[int, str]]:
        rows = self._read(
            "SELECT generation, change FROM commits WHERE generation > %s AND generation <= %s ORDER BY generation",
            (generation, latest),
        )
        return [(int(g), str(change)) for g, change in rows]

    # LLM response cache and usage -----------------------------------------------------------------------
    def cached_response(self, key: str) -> str | None:
        rows = self._read("SELECT response FROM llm_cache WHERE key = %s", (key,))
        return str(rows[0][0]) if rows else None

    def put_response(self, key: str, model: str, response: str) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO llm_cache (key, model, response, created) VALUES (%s, %s, %s, %s) ON CONFLICT (key) "
                "DO UPDATE SET model = excluded.model, response = excluded.response, created = excluded.created",
                (key, model, response, time.time()),
            )

    def add_llm_usage(self, model: str, amounts: dict[str, int]) -> None:
        values = [int(amounts.get(c, 0)) for c in _USAGE_COLUMNS]
        columns = ", ".join(_USAGE_COLUMNS)
        updates = ", ".join(f"{c} = llm_usage.{c} + excluded.{c}" for c in _USAGE_COLUMNS)
        with self.transaction() as db:
            db.execute(
                f"INSERT INTO llm_usage (model, {columns}, updated) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                f"ON CONFLICT (model) DO UPDATE SET {updates}, updated = excluded.updated",
                (model, *values, time.time()),
            )

    def llm_usage(self) -> dict[str, dict[str, int]]:
        columns = ", ".join(_USAGE_COLUMNS)
        rows = self._read(f"SELECT model, {columns} FROM llm_usage ORDER BY model")
        return {str(row[0]): dict(zip(_USAGE_COLUMNS, map(int, row[1:]))) for row in rows}
