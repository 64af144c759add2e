"""The SQLite records' tables (docs/format.md) and the settings each connection to them takes."""

from __future__ import annotations

import sqlite3
import time

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY, title TEXT, metadata TEXT NOT NULL, content_hash TEXT NOT NULL, added REAL NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    doc_id TEXT NOT NULL, idx INTEGER NOT NULL, passage_id TEXT NOT NULL, PRIMARY KEY (doc_id, idx));
CREATE INDEX IF NOT EXISTS chunks_passage ON chunks (passage_id);
CREATE TABLE IF NOT EXISTS passages (
    id TEXT PRIMARY KEY, doc_id TEXT NOT NULL, title TEXT, text TEXT NOT NULL,
    content_hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS passages_hash ON passages (content_hash);
CREATE TABLE IF NOT EXISTS extractions (
    content_hash TEXT PRIMARY KEY, status TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    entities TEXT NOT NULL, triples TEXT NOT NULL, dropped INTEGER NOT NULL, source TEXT NOT NULL,
    error TEXT, attempts INTEGER NOT NULL, updated REAL NOT NULL, linked INTEGER NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL, role TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (model, role, text_hash));
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY, model TEXT NOT NULL, response TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS synonyms (
    phrase TEXT NOT NULL, neighbour TEXT NOT NULL, sim REAL NOT NULL, PRIMARY KEY (phrase, neighbour));
CREATE TABLE IF NOT EXISTS llm_usage (
    model TEXT PRIMARY KEY, calls INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, cache_hits INTEGER NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL);
"""


WAL_WAIT = 30.0  # seconds a new connection retries switching the file to write-ahead logging


def write_ahead_log(db: sqlite3.Connection) -> None:
    """Put the file in write-ahead-log mode (kept in the file: a later connection finds it so). Switching needs
    the file to itself, and SQLite answers "database is locked" at once, without its busy timeout, when another
    process opening the same new file holds it: retried until `WAL_WAIT`."""
    deadline = time.monotonic() + WAL_WAIT
    while True:
        try:
            if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def commit_log(db: sqlite3.Connection) -> None:
    """The commit log's table (docs/format.md), added to an older file by its first writable open: a read-only
    file without it is read as it is (it has no log: another process's commits are reloaded)."""
    try:
        db.execute("CREATE TABLE IF NOT EXISTS commits (generation INTEGER PRIMARY KEY, change TEXT NOT NULL)")
    except sqlite3.OperationalError as exc:
        if "readonly" not in str(exc):
            raise


def claims_table(db: sqlite3.Connection) -> None:
    """The claims on extraction work (docs/format.md, "claims"), added to an older file by its first writable
    open, like the commit log: a read-only file without it is read as it is (it cannot be extracted into)."""
    try:
        db.execute(
            "CREATE TABLE IF NOT EXISTS claims (content_hash TEXT PRIMARY KEY, worker TEXT NOT NULL, "
            "expires REAL NOT NULL)"
        )
    except sqlite3.OperationalError as exc:
        if "readonly" not in str(exc):
            raise


def linked_column(db: sqlite3.Connection) -> bool:
    """Give an older file's extractions their `linked` column (docs/format.md; its rows were all committed, so
    they take 1) at its first writable open; False for a read-only file without it (its rows read as linked)."""
    columns = {str(row[1]) for row in db.execute("PRAGMA table_info(extractions)")}
    if "linked" in columns:
        return True
    try:
        db.execute("ALTER TABLE extractions ADD COLUMN linked INTEGER NOT NULL DEFAULT 1")
    except sqlite3.OperationalError as exc:
        if "readonly" in str(exc):
            return False
        if "duplicate column" in str(exc):  # another process added it meanwhile
            return True
        raise
    return True
