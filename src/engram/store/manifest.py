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

from engram.errors import EmbedderMismatchError, InputError, MemoryFormatError
from engram.store.sqlite_file import check_records_file

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


def open_directory(path: Path, identity: dict[str, Any], create: bool, records: Path) -> None:
    """Check (or, with `create`, make) the memory directory `path` for an embedder of `identity`: a manifest
    written by another embedder, a damaged `records` file, a folder of other files, or a file on the way are
    refused with what to do."""
    for place in (path, *path.parents):
        if place.exists() and not place.is_dir():
            raise InputError(f"{place} is a file; a memory is a directory" + ("" if place == path else f" ({path})"))
    if (path / MANIFEST).exists():
        check_embedder(read_manifest(path), identity, path)
        check_records_file(records)
        snapshots = path / "index"
        if snapshots.exists() and not snapshots.is_dir():
            raise MemoryFormatError(
                f"{snapshots} is a file, where the memory keeps its snapshot folder: move or delete that file "
                "(the snapshot is only a cache: the next open rebuilds it from engram.sqlite)"
            )
        return
    leftovers = (".manifest.json.",)  # a temporary file of an interrupted creation
    if path.exists() and any(p.name != "config.json" and not p.name.startswith(leftovers) for p in path.iterdir()):
        raise MemoryFormatError(f"{path} is not empty and has no engram manifest: choose a new or empty directory")
    if not create:
        raise MemoryFormatError(f"no memory at {path}: index documents into it first")
    path.mkdir(parents=True, exist_ok=True)
    write_manifest(path, identity)


def recorded_embedder(path: Path) -> dict[str, Any] | None:
    """The embedder identity the manifest of the memory directory `path` records; None when there is no readable
    manifest (opening the memory then says what is wrong)."""
    try:
        embedder = read_manifest(path).get("embedder")
    except MemoryFormatError:
        return None
    return embedder if isinstance(embedder, dict) else None
