"""Vectors by text hash from the newest snapshot's parts, for rows a process does not hold.

A directory memory keeps a vector in the SQLite embedding cache only until a snapshot holds it (docs/format.md,
"Each vector stored once"). A process that opened an older snapshot and then replays another process's commits
(engram.index.live.refresh) wants the vectors of rows that process added; once that process has closed, they
lie only in the parts of its snapshot. Each part is read only after its vector and key files match their
checksums, and the files this process maps already (the same inodes: parts are hard-linked from snapshot to
snapshot) are never read again, so a lookup reads the parts written since, not the whole table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engram.store.packed_rows import is_packed, packed_width, unpack
from engram.store.snapshot import (
    SNAPSHOT_MANIFEST,
    STORED,
    SnapshotDamaged,
    manifest_sums,
    newest_folders,
    verify_files,
)
from engram.store.snapshot_parts import file_identity, listed_key_name, part_names, read_keys

log = logging.getLogger(__name__)
Vectors = npt.NDArray[np.float32]
FileId = tuple[int, int]  # (device, inode) of a part's vector file: parts never change once written


def mapped_file(rows: object) -> FileId | None:
    """The (device, inode) of the file `rows` maps (an `np.memmap` from `np.load(..., mmap_mode=...)`), if any."""
    name = getattr(rows, "filename", None)
    if not isinstance(rows, np.memmap) or not name:
        return None
    try:
        return file_identity(Path(name))[:2]
    except OSError:
        return None


class SnapshotLookup:
    """Find vectors by text hash in the newest snapshot under `root`, skipping the parts `mapped(role)` names
    (the files the caller holds). Parts read once are remembered (their key index and a read-only map)."""

    def __init__(self, root: Path, dim: int, mapped: Callable[[str], Collection[FileId]] | None = None) -> None:
        self.root, self.dim = root, dim
        self.mapped = mapped or (lambda role: ())
        self._parts: dict[FileId, tuple[dict[str, int], Vectors]] = {}
        self._damaged: set[FileId] = set()  # manifests and parts found damaged (warned once)

    def find(self, role: str, hashes: Collection[str], held: Collection[FileId] = ()) -> dict[str, Vectors]:
        """The rows of those of `hashes` that the newest snapshot's parts of `role` hold (others are left out);
        `held`: more files to skip (those the caller searched already)."""
        out: dict[str, Vectors] = {}
        wanted = set(hashes)
        folders = newest_folders(self.root)
        if not wanted or not folders:
            return out
        folder = folders[0]
        skip = {*self.mapped(role), *held}
        try:
            manifest = file_identity(folder / SNAPSHOT_MANIFEST)[:2]
            if manifest in self._damaged:
                return out
            sums = manifest_sums(folder)
            for index, name in enumerate(part_names(sums, role)):
                identity = file_identity(folder / name)[:2]
                if identity in skip or identity in self._damaged:
                    continue
                try:
                    keys, rows = self._part(folder, sums, name, listed_key_name(sums, role, index), identity)
                except SnapshotDamaged as exc:  # this part only: the others are still used
                    self._damaged.add(identity)
                    log.warning("vector snapshot %s: %s is not used for lookups: %s", folder, name, exc)
                    continue
                for h in [h for h in wanted if h in keys]:
                    row = rows[keys[h]]
                    out[h] = unpack(row) if is_packed(row) else np.asarray(row, dtype=np.float32)
                    wanted.discard(h)
                if not wanted:
                    break
        except SnapshotDamaged as exc:
            self._damaged.add(manifest)
            log.warning("vector snapshot %s is not used for lookups: %s", folder, exc)
        except (OSError, ValueError) as exc:  # gone meanwhile (a newer snapshot replaced it), unreadable
            log.warning("vector snapshot %s is not used for lookups: %s", folder, exc)
        return out

    def _part(
        self, folder: Path, sums: dict[str, str], name: str, keys_name: str, identity: FileId
    ) -> tuple[dict[str, int], Vectors]:
        known = self._parts.get(identity)
        if known is not None:
            return known
        verify_files(folder, sums, [name, keys_name])
        try:
            keys = read_keys(folder / keys_name)
        except ValueError as exc:
            raise SnapshotDamaged(f"{keys_name}: {exc}") from exc
        rows = np.load(folder / name, mmap_mode="r", allow_pickle=False)
        width = packed_width(self.dim) if is_packed(rows) else self.dim
        shaped = rows.ndim == 2 and rows.dtype in STORED and rows.shape == (len(keys), width)
        if not shaped:
            raise SnapshotDamaged(f"{name}: its rows and keys disagree")
        found = ({str(k): i for i, k in enumerate(keys)}, rows)
        self._parts[identity] = found
        return found
