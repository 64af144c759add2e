"""Versions of a memory's SQLite records (meta key "schema_version") and the steps between them.

Opening a memory runs `migrate`: an older schema is brought up to `SCHEMA_VERSION` in one transaction (another
process may have done it first: the version is checked again inside the transaction), a newer one is refused.
A read-only file is left as it is. See docs/format.md.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engram.errors import MemoryFormatError

SCHEMA_VERSION = 2  # meta "schema_version"; no key: version 1
# Version 2: an LLM extraction's `source` is "MODEL-IDENTITY PROMPT-VERSION"; version 1 recorded the model's
# identity alone, and every version-1 LLM extraction was made with the prompts of version "openie/1".
_V1_PROMPTS = "openie/1"


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the records up to `SCHEMA_VERSION` (in one transaction; another process may do it first). A
    memory written by a newer engram is refused."""
    found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = int(found[0]) if found and str(found[0]).isdigit() else 1
    if version > SCHEMA_VERSION:
        raise MemoryFormatError(
            f"{path} has records schema version {version}; this engram reads up to {SCHEMA_VERSION}: upgrade engram"
        )
    if version == SCHEMA_VERSION:
        return
    try:
        db.execute("BEGIN IMMEDIATE")
        found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if not (found and str(found[0]).isdigit() and int(found[0]) >= SCHEMA_VERSION):
            db.execute(
                "UPDATE extractions SET source = source || ' ' || ? "
                "WHERE source NOT LIKE 'import%' AND source NOT LIKE 'offline:%' AND source NOT LIKE '% %'",
                (_V1_PROMPTS,),
            )
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        db.execute("COMMIT")
    except BaseException as exc:
        if db.in_transaction:
            db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc):
            return  # a read-only copy is read as it is; the first writer migrates it
        raise
