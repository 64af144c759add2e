"""The fact vectors' 8-bit codes (engram.index.state.coded_rows) kept on disk beside the vector snapshot, so the first
query after opening a large memory does not encode every fact again (two passes over the float32 fact table: about as
long as the rest of that query at 0.9M facts).

`index/codes/` holds `fact.codes.npy` (the int8 codes of fact rows 0..rows-1, as a .npy array, rows x dim) and
`manifest.json`, written last: {"format": 2, "files": {"fact.codes.npy": CRC-32}, "rows": its rows, "dim",
"scales": each dimension's scale, "error": the largest coding error of a row within the scales' ranges, "size":
the largest norm of a code row, "norm": the largest row norm, "outliers": the rows coded worse than "error",
"state": the saved state (its `state.json` checksum) whose fact rows they are}. Loading checks the checksum and
the state, then maps the file read-only; anything that does not match is logged and ignored (the codes are then
encoded again by the first query), and so is a manifest of another format (format 1 held faiss codes, read no
more). Fact rows only grow and never change, so codes stay valid for the states saved after theirs: a save that
keeps the file renames its state in the manifest; rows added since (up to `CodedRows.tail_rows`) are scored
exactly until a save writes the codes again. Files are written under temporary names and renamed into place;
the manifest is removed before a file is replaced.

Opening a memory starts the file's checksum on a thread (`check_codes`), so the first query, which loads the
codes, waits for what is left of it instead of hashing the whole file itself.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from engram.index.state.coded_rows import SavedCodes, available, use_codes
from engram.index.state.index_state import IndexState
from engram.store.manifest import atomic_write_text
from engram.store.packed_rows import PACKED
from engram.store.snapshot import CRC, PendingCheck, SnapshotDamaged, file_checksum, verify_files

FOLDER = ("index", "codes")
CODES_FILE = "fact.codes.npy"
OLD_FILES = ("fact.faiss",)  # format 1's codes, removed when codes are written again
FORMAT = 2
log = logging.getLogger(__name__)


def _folder(root: Path) -> Path:
    return root.joinpath(*FOLDER)


def _manifest(folder: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    atomic_write_text(folder / "manifest.json", json.dumps(manifest))


def check_codes(root: Path, state: IndexState) -> PendingCheck | None:
    """The saved codes' checksum, started on a thread when their manifest names the saved state `state` was
    restored from (None otherwise): `load_codes` takes its result instead of hashing the file again."""
    folder = _folder(root)
    manifest = _manifest(folder)
    if manifest is None or state.caches.saved_as is None or manifest.get("state") != state.caches.saved_as:
        return None
    files = manifest.get("files")
    if not isinstance(files, dict) or not isinstance(files.get(CODES_FILE), str):
        return None
    return PendingCheck(folder, files, [CODES_FILE])


def load_codes(root: Path, state: IndexState, check: PendingCheck | None = None) -> SavedCodes | None:
    """The saved codes of `state`'s fact rows, mapped read-only, when their manifest names the saved state
    `state` was restored from and the file matches its checksum; else None (logged when damaged). `check`
    (from `check_codes`) is the file's checksum begun earlier: used when it checked the file and checksum the
    manifest names now, else stopped and the file hashed here."""
    folder = _folder(root)
    manifest = _manifest(folder)
    if manifest is None or state.caches.saved_as is None or manifest.get("state") != state.caches.saved_as:
        if check is not None:
            check.cancel()
        return None
    try:
        _verify(folder, manifest, check)
        codes = np.load(folder / CODES_FILE, mmap_mode="r", allow_pickle=False)
        scales = np.asarray(manifest["scales"], dtype=np.float32).reshape(-1)
        outliers = np.asarray(manifest["outliers"], dtype=np.int64).reshape(-1)
        numbers = [float(manifest[key]) for key in ("error", "size", "norm")]
        rows, dim = int(manifest["rows"]), state.vectors["fact"].dim
        if codes.dtype != np.int8 or codes.ndim != 2 or codes.shape[1] != dim or len(scales) != dim:
            raise ValueError("not 8-bit codes of this memory's dimension")
        if len(codes) != rows or rows > len(state.facts):
            raise ValueError("its rows are not the manifest's or the memory's")
        if len(outliers) and not 0 <= int(outliers.min()) <= int(outliers.max()) < rows:
            raise ValueError("outliers beyond its rows")
        if not all(math.isfinite(x) and x >= 0 for x in numbers) or not (np.isfinite(scales) & (scales > 0)).all():
            raise ValueError("its scales or error bound are not positive numbers")
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SnapshotDamaged) as exc:
        log.warning("fact codes in %s are not used (%s): they are encoded again when needed", folder, exc)
        return None
    error, size, norm = numbers
    return SavedCodes(codes, scales, error, size, norm, outliers)


def _verify(folder: Path, manifest: dict[str, Any], check: PendingCheck | None) -> None:
    """Raise `SnapshotDamaged` unless the codes file matches the manifest's checksum: `check`'s result when it
    hashed this file (unchanged since) against that checksum, else a check made now."""
    files = manifest["files"]
    if not isinstance(files, dict):
        raise ValueError("its manifest lists no files")
    if check is not None and check.sums.get(CODES_FILE) == files.get(CODES_FILE) and check.unchanged():
        error = check.error()
        if error:
            raise SnapshotDamaged(error)
        if check.unchanged():  # not replaced while it was hashed
            return
    elif check is not None:
        check.cancel()
    verify_files(folder, files, [CODES_FILE])


def save_codes(root: Path, state: IndexState, token: str, encode: bool = True) -> None:
    """Keep the fact codes of `state` beside the snapshot written as saved state `token`: the file as it is
    when it holds all but at most `tail_rows` of the rows (its manifest then names `token`), else the codes
    written again (encoded first when this process has none and `encode`). Nothing for a memory that does not
    score facts through codes. Without `encode` (a close that wrote no snapshot) codes saved for another state,
    perhaps a newer one, are left as they are. A failure to write is logged, not raised: the codes are a cache."""
    size = len(state.facts)
    if not available() or not use_codes(state.config, size) or (not encode and state.caches.fact_codes.saved() is None):
        return
    if state.vectors["fact"].dtype == PACKED:  # packed 8-bit fact rows are their own codes: nothing to keep
        return
    folder, codes = _folder(root), state.caches.fact_codes
    manifest = _manifest(folder)
    same = manifest is not None and state.caches.saved_as is not None and manifest.get("state") == state.caches.saved_as
    if manifest is not None and not same and not encode:
        return
    try:
        if manifest is not None and same and codes.saved() is None and size - int(manifest["rows"]) <= codes.tail_rows:
            _rename(folder, manifest, token)  # not loaded here: the file stays as it is
            return
        with codes.held(state.vectors["fact"].view(), size) as saved:
            if saved is None:
                return
            kept = codes.saved_rows and codes.encoded - codes.saved_rows <= codes.tail_rows
            if manifest is not None and same and kept:
                _rename(folder, manifest, token)  # the file holds these codes' first rows
                return
            _write(folder, saved, token)
            codes.saved_rows = codes.encoded
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        log.warning("fact codes were not saved in %s (%s): the next open encodes them when needed", folder, exc)


def _rename(folder: Path, manifest: dict[str, Any], token: str) -> None:
    if manifest.get("state") != token:
        _write_manifest(folder, {**manifest, "state": token})


def _write(folder: Path, saved: SavedCodes, token: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)  # the old file stops counting before it is replaced
    tmp = folder / f".{CODES_FILE}.tmp"
    with tmp.open("wb") as handle:
        np.save(handle, np.ascontiguousarray(saved.codes), allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())
    checksum = file_checksum(tmp, CRC)
    os.replace(tmp, folder / CODES_FILE)
    for old in OLD_FILES:
        (folder / old).unlink(missing_ok=True)
    rows = len(saved.codes)
    manifest = {
        "format": FORMAT,
        "files": {CODES_FILE: checksum},
        "rows": rows,
        "dim": int(saved.codes.shape[1]),
        "scales": [float(x) for x in saved.scales],
        "error": saved.error,
        "size": saved.size,
        "norm": saved.norm,
        "outliers": saved.outliers[saved.outliers < rows].tolist(),
        "state": token,
    }
    _write_manifest(folder, manifest)
