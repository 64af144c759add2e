"""The SQLite file under a record store: owner-only permissions, and telling a damaged or missing file (an
error naming the fix) from a transient one (passed through)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from engram.errors import MemoryFormatError


def make_private(path: Path) -> None:
    """Create the database file readable by its owner only (0600), or make an existing one so; SQLite gives
    its -wal and -shm files the database file's permissions."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
            part = path.with_name(name)
            if part.exists() and part.stat().st_mode & 0o077:
                part.chmod(0o600)
    except OSError:  # a read-only copy or someone else's file: SQLite reports what matters when it opens
        pass


# SQLite errors that mean the file itself is damaged or unusable (not a transient lock or a caller's mistake)
_DAMAGE = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_FULL")


def check_records_file(path: Path) -> None:
    """Refuse to open an existing memory whose records file is missing or empty: opening would silently
    create an empty memory beside the manifest and snapshots."""
    if not path.exists():
        problem = "is missing"
    elif path.is_file() and path.stat().st_size == 0:
        problem = "is empty"
    else:
        return
    raise MemoryFormatError(
        f"{path} {problem}, though {path.parent} has a manifest: the memory's records (documents, extractions) "
        "are gone. Restore engram.sqlite from a backup, or index the documents into a new memory directory"
    )


def damaged(path: Path, exc: sqlite3.Error) -> MemoryFormatError:
    return MemoryFormatError(
        f"{path} is damaged (SQLite: {exc}); restore it from a backup, or index the documents into a new "
        "memory directory"
    )


def is_damage(exc: sqlite3.Error) -> bool:
    """A damaged file: SQLite says so, or a stored text is not UTF-8 (engram writes only UTF-8, so such a value
    was put there by hand or by a bad restore; Python's sqlite3 cannot even read the row)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    not_text = isinstance(exc, sqlite3.OperationalError) and str(exc).startswith("Could not decode to UTF-8")
    return type(exc) is sqlite3.DatabaseError or name.startswith(_DAMAGE) or not_text


def loads_column(text: Any, path: Path) -> Any:
    """A JSON column's value; a row that is not JSON means the file was damaged."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise MemoryFormatError(
            f"{path} is damaged (a JSON column cannot be read: {exc}); restore it from a backup"
        ) from exc
