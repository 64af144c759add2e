"""The memory directory's manifest: format name and version, and the embedder that wrote the vectors.

manifest.json is written once, atomically, when a memory is created. Opening a memory checks the format
version (a newer one is refused) and the embedder identity (another embedder is refused: its vectors would
not be comparable).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from engram.errors import EmbedderMismatchError, MemoryFormatError

FORMAT_NAME = "engram-memory"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, fsync, then rename over it: readers see old or new, never a
    torn file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_manifest(directory: Path, embedder: dict[str, Any]) -> dict[str, Any]:
    manifest = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "embedder": embedder}
    atomic_write_text(directory / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or bytes that are not UTF-8
        raise MemoryFormatError(
            f"{path} cannot be read as an engram manifest ({exc}); it is damaged: restore it from a backup"
        ) from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise MemoryFormatError(f"{directory} is not an engram memory (no '{FORMAT_NAME}' manifest)")
    version = manifest.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise MemoryFormatError(
            f"{directory} has format version {version}; this engram reads up to {FORMAT_VERSION}: upgrade engram"
        )
    return manifest


def check_embedder(manifest: dict[str, Any], identity: dict[str, Any], directory: Path) -> None:
    stored = manifest.get("embedder")
    if stored != identity:
        raise EmbedderMismatchError(
            f"{directory} was written with embedder {json.dumps(stored, sort_keys=True)}, but "
            f"{json.dumps(identity, sort_keys=True)} is configured. Open it with the same embedder "
            "(--embedder / ENGRAM_EMBEDDER), or index into a new memory directory."
        )
