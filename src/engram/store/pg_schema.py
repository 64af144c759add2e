"""Opening a PostgreSQL memory: the URL (`postgresql://USER:PASSWORD@HOST:PORT/DB?schema=NAME`), the pgvector
extension, the memory's schema and tables, and the identity checks the directory backend keeps in
manifest.json (format, records schema version, embedder). See docs/format.md, "PostgreSQL backend"."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from engram.errors import EmbedderMismatchError, InputError, MemoryFormatError, MissingDependencyError
from engram.store.manifest import FORMAT_NAME, FORMAT_VERSION
from engram.store.migrate import SCHEMA_VERSION

SCHEMES = ("postgresql://", "postgres://")
DEFAULT_SCHEMA = "engram"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_LOCK_KEY = 0x656E6772616D  # pg_advisory_xact_lock key of schema creation ("engram")

TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY, title TEXT, metadata TEXT NOT NULL, content_hash TEXT NOT NULL,
    added DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    doc_id TEXT NOT NULL, idx INTEGER NOT NULL, passage_id TEXT NOT NULL, PRIMARY KEY (doc_id, idx));
CREATE INDEX IF NOT EXISTS chunks_passage ON chunks (passage_id);
CREATE TABLE IF NOT EXISTS passages (
    id TEXT PRIMARY KEY, doc_id TEXT NOT NULL, title TEXT, text TEXT NOT NULL, content_hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS passages_hash ON passages (content_hash);
CREATE TABLE IF NOT EXISTS extractions (
    content_hash TEXT PRIMARY KEY, status TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    entities TEXT NOT NULL, triples TEXT NOT NULL, dropped INTEGER NOT NULL, source TEXT NOT NULL,
    error TEXT, attempts INTEGER NOT NULL, updated DOUBLE PRECISION NOT NULL, linked BOOLEAN NOT NULL DEFAULT TRUE);
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL, role TEXT NOT NULL, text_hash TEXT NOT NULL, vector vector NOT NULL,
    PRIMARY KEY (model, role, text_hash));
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY, model TEXT NOT NULL, response TEXT NOT NULL, created DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS synonyms (
    phrase TEXT NOT NULL, neighbour TEXT NOT NULL, sim DOUBLE PRECISION NOT NULL, PRIMARY KEY (phrase, neighbour));
CREATE TABLE IF NOT EXISTS llm_usage (
    model TEXT PRIMARY KEY, calls BIGINT NOT NULL DEFAULT 0, prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0, cache_hits BIGINT NOT NULL DEFAULT 0,
    retries BIGINT NOT NULL DEFAULT 0, failures BIGINT NOT NULL DEFAULT 0, updated DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS commits (generation BIGINT PRIMARY KEY, change TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (
    content_hash TEXT PRIMARY KEY, worker TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL);
INSERT INTO meta (key, value) VALUES ('generation', '0') ON CONFLICT (key) DO NOTHING;
"""


def is_database_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(SCHEMES)


def split_url(url: str) -> tuple[str, str]:
    """(the libpq connection URL, the memory's schema): `?schema=NAME` is engram's, not libpq's."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    names = [v for k, v in query if k == "schema"]
    schema = names[-1] if names else DEFAULT_SCHEMA
    if not _NAME.fullmatch(schema):
        raise InputError(
            f"schema {schema!r} in {redact(url)}: use letters, digits and underscores (at most 63, not starting "
            "with a digit)"
        )
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), schema


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def psycopg_module() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise MissingDependencyError("a postgresql:// memory needs psycopg: pip install 'engram[postgres]'") from exc
    return psycopg


def connect(url: str) -> Any:
    psycopg = psycopg_module()
    conninfo, _ = split_url(url)
    try:
        return psycopg.connect(conninfo, autocommit=True)
    except psycopg.Error as exc:
        raise InputError(f"cannot connect to {redact(url)}: {str(exc).strip()}") from exc


def _vector_schema(conn: Any, url: str) -> str:
    """The schema holding pgvector's `vector` type, creating the extension when it is missing."""
    found = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'")
    row = found.fetchone()
    if row is None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg_module().Error as exc:
            raise InputError(
                f"{redact(url)} has no pgvector extension and engram may not create it ({str(exc).strip()}): "
                "run `CREATE EXTENSION vector;` as a privileged user (managed services: enable pgvector)"
            ) from exc
        row = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'")
        row = row.fetchone()
    return str(row[0])


def prepare_schema(conn: Any, url: str, schema: str, identity: dict[str, Any], create: bool) -> None:
    """Create (when `create`) or check the memory's schema, then point the connection's search path at it.
    Serialised by an advisory lock: several processes may open a new memory at once."""
    location = redact(url)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        vector_schema = _vector_schema(conn, url)
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)).fetchone()[0]
        quoted = '"' + schema + '"'
        conn.execute(f'SET LOCAL search_path TO {quoted}, "{vector_schema}"')
        if tables == 0 and not create:
            raise MemoryFormatError(f"no memory at {location}: index documents into it first")
        if tables and not _has_meta(conn, schema):
            raise MemoryFormatError(f"schema {schema} of {location} holds other tables: choose another ?schema=")
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        conn.execute(TABLES)
        _linked_column(conn, schema)
        _check_identity(conn, location, identity)
    conn.execute(f'SET search_path TO {quoted}, "{vector_schema}"')


def _linked_column(conn: Any, schema: str) -> None:
    """Give an older memory's extractions their `linked` column (docs/format.md; its rows were all committed, so
    they take TRUE); checked first, as ALTER TABLE locks the table even when the column is there."""
    found = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = 'extractions' "
        "AND column_name = 'linked'",
        (schema,),
    ).fetchone()
    if found is None:
        conn.execute("ALTER TABLE extractions ADD COLUMN IF NOT EXISTS linked BOOLEAN NOT NULL DEFAULT TRUE")


def _has_meta(conn: Any, schema: str) -> bool:
    found = conn.execute("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'meta'", (schema,)).fetchone()
    if found is None:
        return False
    return conn.execute("SELECT 1 FROM meta WHERE key = 'format'").fetchone() is not None


def _check_identity(conn: Any, location: str, identity: dict[str, Any]) -> None:
    """Format, records schema version and embedder, written by the first opener and checked by the others."""
    wanted = {
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        "schema_version": str(SCHEMA_VERSION),
        "embedder": json.dumps(identity, sort_keys=True),
    }
    stored = dict(conn.execute("SELECT key, value FROM meta WHERE key = ANY(%s)", (list(wanted),)).fetchall())
    if not stored.get("format"):
        for key, value in wanted.items():
            conn.execute("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", (key, value))
        return
    for key in ("format_version", "schema_version"):
        if int(stored.get(key, "0")) > int(wanted[key]):
            raise MemoryFormatError(
                f"{location} has {key.replace('_', ' ')} {stored[key]}; this engram reads up to {wanted[key]}: "
                "upgrade engram"
            )
    if stored.get("embedder") != wanted["embedder"]:
        raise EmbedderMismatchError(
            f"{location} was written with embedder {stored.get('embedder')}, but {wanted['embedder']} is "
            "configured. Open it with the same embedder (--embedder / ENGRAM_EMBEDDER), or use another ?schema="
        )
