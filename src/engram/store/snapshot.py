"""Vector snapshots: the embedding cache dumped to `.npy` files, for fast opening.

`index/g{N}/` holds, per role (passage, phrase, fact), `{role}.npy` (float32, or float16 for the phrase and fact
vectors of memories that store them so (docs/format.md), one L2-normalised row per text;
the rows may go on in `{role}.1.npy`, `{role}.2.npy`, ...: parts, engram.store.snapshot_parts), `{role}-keys.json`
(and `{role}-keys.{i}.json` for part i: [SHA-256 of the embedded text, ...] in row order; snapshots written before
parts have one `keys.json`, {role: [...]}) and `manifest.json` ({"files": {name: checksum of the file}}: "crc32:"
and 8 hex digits for the vector matrices, which every open checks, the SHA-256 hex digest for the others; older
snapshots have SHA-256 for all, and each file is checked in its own form).
A snapshot is where a directory memory keeps its vectors: once one holds a row, the index drops that row's vector
from the SQLite embedding cache, so each vector is stored once (docs/format.md). On opening, vectors are looked up
in the newest snapshot whose checksums match, then in the SQLite embedding cache (the rows no snapshot holds yet),
then computed. A snapshot that does not match its checksums (or cannot be read) is never used: a warning is
logged and the vectors come from SQLite or the embedder. Written to a temporary folder (files and folder fsynced)
and renamed into place; arrays are loaded memory-mapped with `allow_pickle=False`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.store.packed_rows import PACKED
from engram.store.snapshot_parts import (
    SavedPart,
    file_identity,
    key_name,
    keys_bytes,
    link_parts,
    linkable,
    listed_key_name,
    part_name,
    part_names,
    read_keys,
)

ROLES = ("passage", "phrase", "fact")
Vectors = npt.NDArray[np.float32]
# the dtypes a snapshot's vector files may hold (int8: rows packed with their scales, engram.store.packed_rows)
STORED = (np.dtype(np.float32), np.dtype(np.float16), PACKED)
VectorTable = dict[str, tuple[list[str], list[Vectors]]]  # role -> (keys, the matrix's parts, rows in order)
# what `write_snapshot` takes: role -> (keys, matrix, or the matrix as row blocks to write one after another)
BlockTable = Mapping[str, tuple[Sequence[str], Vectors | Sequence[Vectors]]]
WRITE_ROWS = 65_536  # rows converted and written at a time
HASH_WINDOW = 256 << 20  # bytes mapped and hashed at a time (`file_checksum`)
CRC = "crc32:"  # the form of a CRC-32 checksum in a manifest ("crc32:" + 8 hex digits); others are SHA-256
Writer = Callable[[Any], object]  # writes one file's bytes to the handle it is given
SNAPSHOT_MANIFEST = "manifest.json"
STALE_TEMP_SECONDS = 6 * 3600  # a temporary folder untouched this long was left by a crash
Verified = tuple[Path, dict[str, str]] | None
_GENERATION = re.compile(r"g(\d+)")
_TEMP = re.compile(r"\.g(\d+)\..+")

log = logging.getLogger(__name__)


class SnapshotDamaged(Exception):
    """A snapshot that does not match its checksums or cannot be read (caught by the readers of snapshot files; never
    reaches a caller of engram)."""


def snapshot_dir(root: Path, generation: int) -> Path:
    return root / "index" / f"g{generation}"


def array_writer(array: npt.NDArray[Any]) -> Writer:
    """A `Writer` of one array as a .npy file (the saved state's tables and walk arrays, which a snapshot
    carries beside its vectors), no pickled objects."""

    def write(handle: Any) -> None:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)

    return write


class _Digest:
    """SHA-256, or CRC-32 for the vector matrices (`CRC`): damage detection at twice the speed, for the
    gigabytes every open checks. A manifest names the kind by the checksum's form."""

    def __init__(self, crc: bool) -> None:
        self.crc, self._sha, self._value = crc, None if crc else hashlib.sha256(), 0

    def update(self, data: Any) -> None:
        if self._sha is None:
            self._value = zlib.crc32(data, self._value)
        else:
            self._sha.update(data)

    def text(self) -> str:
        return f"{CRC}{self._value:08x}" if self._sha is None else self._sha.hexdigest()


class _HashingWriter:
    """A file handle that hashes what is written through it (np.save streams arrays in chunks)."""

    def __init__(self, handle: Any, crc: bool) -> None:
        self.handle, self.digest = handle, _Digest(crc)

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return int(self.handle.write(data))


def _write_file(path: Path, write: Any, crc: bool = False) -> str:
    """Write `path` through `write(handle)`, fsync it, and return the checksum of its bytes (SHA-256, or CRC-32
    with `crc`)."""
    with path.open("wb") as raw:
        handle = _HashingWriter(raw, crc)
        write(handle)
        raw.flush()
        os.fsync(raw.fileno())
    return handle.digest.text()


def file_checksum(path: Path, like: str = "", stop: threading.Event | None = None) -> str:
    """The checksum of a file in the form of `like` (CRC-32 when it starts with `CRC`, else SHA-256); "" when
    `stop` is set before the end. Hashed from memory-mapped windows (`HASH_WINDOW` bytes each, unmapped after
    use, so the mapping adds at most one window to the process's resident size): each window is hashed without
    the GIL, so a thread checking gigabytes beside Python work waits for the GIL a few times per file, not once
    per small read."""
    digest = _Digest(like.startswith(CRC))
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        for start in range(0, size, HASH_WINDOW):
            if stop is not None and stop.is_set():
                return ""
            length = min(HASH_WINDOW, size - start)
            with mmap.mmap(handle.fileno(), length, access=mmap.ACCESS_READ, offset=start) as window:
                digest.update(window)
    return digest.text()


def _checksum_or_error(path: Path, like: str) -> str | OSError:
    try:
        return file_checksum(path, like)
    except OSError as exc:
        return exc


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_npy(handle: Any, blocks: list[Vectors], written: Callable[[Vectors], object] | None = None) -> None:
    """One .npy file of the row blocks stacked (the bytes `np.save` writes for the stacked matrix), in the dtype
    of the first block (float16 or float32, little-endian, or packed int8 rows), converted a slice at a time, so no
    stacked copy is made; `written(rows)` is told each slice once written."""
    rows = sum(len(b) for b in blocks)
    kinds: dict[np.dtype[Any], np.dtype[Any]] = {np.dtype(np.float16): np.dtype("<f2"), PACKED: PACKED}
    kind = kinds.get(blocks[0].dtype, np.dtype("<f4"))
    header = {"descr": np.lib.format.dtype_to_descr(kind), "fortran_order": False,
              "shape": (rows, int(blocks[0].shape[1]))}  # fmt: skip
    np.lib.format.write_array_header_1_0(handle, header)
    for block in blocks:
        for start in range(0, len(block), WRITE_ROWS):
            part = block[start : start + WRITE_ROWS]
            handle.write(np.ascontiguousarray(part, dtype=kind).tobytes())
            if written is not None:
                written(part)


def write_snapshot(
    root: Path,
    generation: int,
    tables: BlockTable,
    extra: dict[str, Writer] | None = None,
    written: Callable[[str, Vectors], object] | None = None,
    saved: Mapping[str, Sequence[SavedPart | None]] | None = None,
) -> dict[str, str]:
    """Write snapshot `generation`: the vector tables, and `extra` files (name -> writer) under the same
    manifest; `written(role, rows)` is told each slice of vector rows once written (to let their pages go).
    `saved[role][i]`, when given, is the snapshot file that block i of `role` maps unwritten: such leading blocks
    are hard-linked as parts (engram.store.snapshot_parts) and only the blocks after them are written.
    Returns the files' checksums (as written by this call, whatever another process writes later)."""
    final = snapshot_dir(root, generation)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".g{generation}.", dir=final.parent))
    try:
        sums: dict[str, str] = {}
        for role, (keys, matrix) in tables.items():
            blocks = [matrix] if isinstance(matrix, np.ndarray) else list(matrix)
            sums |= _write_parts(tmp, role, keys, blocks, list((saved or {}).get(role, [])), written)
        for name, write in (extra or {}).items():
            sums[name] = _write_file(tmp / name, write)
        manifest = json.dumps({"files": sums}, indent=1, sort_keys=True).encode("utf-8")
        _write_file(tmp / SNAPSHOT_MANIFEST, lambda h: h.write(manifest))
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        try:
            tmp.rename(final)
        except OSError:
            if not final.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process wrote this generation meanwhile
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    prune_snapshots(root, generation)
    return sums


def _write_parts(
    folder: Path,
    role: str,
    keys: Sequence[str],
    blocks: list[Vectors],
    saved: list[SavedPart | None],
    written: Callable[[str, Vectors], object] | None,
) -> dict[str, str]:
    """`role`'s vector and key files in `folder`: the leading saved blocks linked, the others written as one part
    (its keys: `keys` from the first row not linked on, so only those are read)."""
    count = linkable(saved, blocks)
    linked = link_parts(folder, role, [p for p in saved[:count] if p is not None]) if count else None
    if linked is None:
        linked, count = {}, 0
    rest, first = blocks[count:], sum(len(b) for b in blocks[:count])
    if count and not sum(len(b) for b in rest):
        return linked
    done = None if written is None else (lambda rows: written(role, rows))
    save = partial(_write_npy, blocks=rest, written=done)
    text = keys_bytes(keys[first:])
    vectors, key_file = part_name(role, count), key_name(role, count)
    return linked | {
        vectors: _write_file(folder / vectors, save, crc=True),
        key_file: _write_file(folder / key_file, lambda h: h.write(text)),
    }


def newest_folders(root: Path) -> list[Path]:
    """The snapshot folders under `root / "index"`, newest generation first."""
    folder = root / "index"
    if not folder.is_dir():
        return []
    found = sorted((int(m.group(1)), child) for child in folder.iterdir() if (m := _GENERATION.fullmatch(child.name)))
    return [child for _, child in reversed(found)]


def manifest_sums(folder: Path) -> dict[str, str]:
    """The checksums a snapshot's manifest lists, by file name (`SnapshotDamaged` when it has none readable)."""
    return _manifest(folder)


def _manifest(folder: Path) -> dict[str, str]:
    try:
        sums = json.loads((folder / SNAPSHOT_MANIFEST).read_bytes().decode("utf-8"))["files"]
    except FileNotFoundError as exc:
        raise SnapshotDamaged("it has no checksum manifest") from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SnapshotDamaged(f"its checksum manifest cannot be read ({exc})") from exc
    if not isinstance(sums, dict):
        raise SnapshotDamaged("its checksum manifest does not list every file")
    return sums


def verify_files(folder: Path, sums: dict[str, str], names: Sequence[str]) -> None:
    """Raise `SnapshotDamaged` unless every one of `names` is listed in `sums` and matches its checksum (files
    hashed side by side)."""
    if not set(names) <= set(sums):
        raise SnapshotDamaged("its checksum manifest does not list every file")
    ordered = sorted(names)
    # files hashed side by side: hashing releases the GIL, and a large memory's vectors are gigabytes
    with ThreadPoolExecutor(max_workers=max(1, min(len(ordered), os.cpu_count() or 1))) as pool:
        digests = pool.map(_checksum_or_error, [folder / n for n in ordered], [sums[n] for n in ordered])
        for name, digest in zip(ordered, digests):
            if isinstance(digest, OSError):
                raise SnapshotDamaged(f"{name} cannot be read ({digest})")
            if digest != sums[name]:
                raise SnapshotDamaged(f"{name} does not match its checksum")


def verified_files(root: Path, generation: int, names: Sequence[str], optional: Sequence[str] = ()) -> Verified:
    """(folder, its manifest's checksums) of snapshot `generation` when its manifest lists all of `names` and
    those files match their checksums, as do those of `optional` that it lists (the others are not read); None
    when there is no such snapshot or it was written without them (an older format), and None with a warning
    logged when they are damaged."""
    folder = snapshot_dir(root, generation)
    if not (folder / SNAPSHOT_MANIFEST).exists():
        return None
    try:
        sums = _manifest(folder)
        if not set(names) <= set(sums):
            return None
        verify_files(folder, sums, [*names, *(n for n in optional if n in sums)])
    except SnapshotDamaged as exc:
        log.warning("saved files of snapshot %s are not used: %s; they are rebuilt from the records", folder, exc)
        return None
    return folder, sums


class PendingCheck:
    """Checksums of some of a snapshot's files, computed on one thread while the caller reads the others (hashing
    releases the GIL): the caller may map those files but must not use what they hold before `passed()` says
    they match."""

    def __init__(self, folder: Path, sums: dict[str, str], names: Sequence[str]) -> None:
        self.folder, self._stop, self._error = folder, threading.Event(), ""
        missing = sorted(set(names) - set(sums))
        if missing:
            self._error = f"its checksum manifest does not list {missing[0]}"
        self.sums = {n: sums[n] for n in names if n in sums}  # what is checked, against which checksum
        self.identities = {n: _identity_or_none(folder / n) for n in self.sums}  # the files as they were
        self._thread = threading.Thread(target=self._run, args=(sums, [] if missing else list(names)), daemon=True)
        self._thread.start()

    def _run(self, sums: dict[str, str], names: list[str]) -> None:
        for name in names:
            try:
                digest = file_checksum(self.folder / name, sums[name], self._stop)
            except OSError as exc:
                self._error = f"{name} cannot be read ({exc})"
                return
            if self._stop.is_set():
                self._error = "its check was stopped before the end"  # never read as a pass
                return
            if digest != sums[name]:
                self._error = f"{name} does not match its checksum"
                return

    def error(self) -> str:
        """Wait for the checksums; what did not match, could not be read or was not checked ("" when all
        matched)."""
        self._thread.join()
        return self._error

    def unchanged(self) -> bool:
        """Whether every checked file is still the one the check started on (device, inode, size, mtime)."""
        return all(_identity_or_none(self.folder / n) == seen for n, seen in self.identities.items())

    def passed(self) -> bool:
        """Wait for the checksums; False (damage logged as `verified_files` logs it) unless all matched."""
        if self.error():
            log.warning("saved files of snapshot %s are not used: %s; they are rebuilt from the records",
                        self.folder, self._error)  # fmt: skip
        return not self._error

    def cancel(self) -> None:
        """Stop hashing (the caller gave up on the files for another reason)."""
        self._stop.set()
        self._thread.join()


def _identity_or_none(path: Path) -> tuple[int, int, int, int] | None:
    try:
        return file_identity(path)
    except OSError:
        return None


def _read_verified(folder: Path) -> VectorTable:
    """The snapshot in `folder`, after checking every file against the checksums in its manifest."""
    sums = _manifest(folder)
    names = {role: part_names(sums, role) or [f"{role}.npy"] for role in ROLES}
    old = "keys.json" in sums  # written before parts: every role's keys in one file
    key_files = ["keys.json"] if old else [listed_key_name(sums, r, i) for r in ROLES for i in range(len(names[r]))]
    verify_files(folder, sums, [*(n for role in ROLES for n in names[role]), *key_files])
    try:
        every = json.loads((folder / "keys.json").read_text(encoding="utf-8")) if old else None
        out: VectorTable = {}
        for role in ROLES:
            keys = every[role] if every is not None else _part_keys(folder, sums, role, len(names[role]))
            parts = [np.load(folder / name, mmap_mode="r", allow_pickle=False) for name in names[role]]
            if any(p.ndim != 2 or p.dtype not in STORED for p in parts) or sum(map(len, parts)) != len(keys):
                raise ValueError(f"{role}: rows and keys disagree")
            out[role] = ([str(k) for k in keys], parts)
        return out
    except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
        raise SnapshotDamaged(f"it cannot be read ({exc})") from exc


def _part_keys(folder: Path, sums: dict[str, str], role: str, parts: int) -> list[str]:
    keys: list[str] = []
    for index in range(parts):
        keys += read_keys(folder / listed_key_name(sums, role, index))
    return keys


def load_snapshot(root: Path) -> tuple[VectorTable, bool]:
    """(the newest snapshot that matches its checksums, or {} when there is none; whether a newer one was
    damaged and skipped). Damage is logged as a warning: the vectors then come from SQLite or the embedder."""
    damaged = False
    for child in newest_folders(root):
        try:
            return _read_verified(child), damaged
        except SnapshotDamaged as exc:
            damaged = True
            log.warning(
                "vector snapshot %s is not used: %s; vectors are rebuilt from engram.sqlite or embedded again",
                child,
                exc,
            )
    return {}, damaged


def read_latest_snapshot(root: Path) -> VectorTable:
    """The newest snapshot that matches its checksums (empty when there is none)."""
    return load_snapshot(root)[0]


def prune_snapshots(root: Path, written: int) -> None:
    """Remove the generations older than the one just `written` (never a newer one another process wrote),
    and temporary folders left by a crash (untouched for `STALE_TEMP_SECONDS`; younger ones may be another
    process's snapshot in progress)."""
    folder = root / "index"
    if not folder.is_dir():
        return
    now = time.time()
    for child in folder.iterdir():
        if (m := _GENERATION.fullmatch(child.name)) and int(m.group(1)) < written:
            shutil.rmtree(child, ignore_errors=True)
        elif _TEMP.fullmatch(child.name):
            try:
                stale = now - child.stat().st_mtime > STALE_TEMP_SECONDS
            except OSError:
                continue
            if stale:
                shutil.rmtree(child, ignore_errors=True)
