"""Vector files of a snapshot in parts, so a close after a few changes writes only the rows added since.

A role's rows (passage, phrase or fact vectors) may lie in several files, one after another: part 0 is
`{role}.npy`, part i > 0 `{role}.{i}.npy`, each with its rows' keys (text hashes) in `{role}-keys.json` /
`{role}-keys.{i}.json`; a snapshot's parts are the ones its manifest lists, numbered from 0 without a gap. Rows
never move and vectors never change, so the rows a process mapped from the snapshot it opened are, file for
file, leading parts of the next snapshot: writing that one hard-links those files (same inodes, so the same bytes
and the checksums already in the manifest it was opened from) and writes the rows added since, and their keys, as
one new part. A file that is not the one mapped any more (replaced, another inode or size) or that cannot be
linked (a file system without hard links) is written out instead. At most `MAX_PARTS` parts: past that, the
trailing ones are written again with the new rows as one part. A table of fewer than `MIN_LINK_ROWS` saved rows
is written whole, as one file: rewriting it costs little.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
MAX_PARTS = 8
MIN_LINK_ROWS = 16_384  # fewer saved rows than this (24 MiB at 384 dimensions) are written again, not linked


def part_name(role: str, index: int) -> str:
    return f"{role}.npy" if index == 0 else f"{role}.{index}.npy"


def key_name(role: str, index: int) -> str:
    """The file of part `index`'s keys (a JSON list of the rows' text hashes)."""
    return f"{role}-keys.json" if index == 0 else f"{role}-keys.{index}.json"


def part_names(sums: dict[str, str], role: str) -> list[str]:
    """The files of `role`'s parts that a manifest's checksums list, in row order (part 0 first; none when the
    manifest lacks part 0)."""
    out: list[str] = []
    while part_name(role, len(out)) in sums:
        out.append(part_name(role, len(out)))
    return out


def file_identity(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


@dataclass(frozen=True)
class SavedFile:
    """A snapshot's vector file whose rows a process holds as an unwritten memory map: where it lies, its
    checksum in that snapshot's manifest, and the file's identity (device, inode, size, mtime) when mapped."""

    path: Path
    checksum: str
    identity: tuple[int, int, int, int]

    @classmethod
    def of(cls, path: Path, checksum: str) -> SavedFile:
        return cls(path, checksum, file_identity(path))

    def unchanged(self) -> bool:
        """Whether `path` is still the file that was mapped."""
        try:
            return file_identity(self.path) == self.identity
        except OSError:
            return False


@dataclass(frozen=True)
class SavedPart:
    """A part of a snapshot a process opened: its vector file (mapped unwritten) and its keys file."""

    vectors: SavedFile
    keys: SavedFile

    def unchanged(self) -> bool:
        return self.vectors.unchanged() and self.keys.unchanged()


def linkable(saved: Sequence[SavedPart | None], blocks: Sequence[Vectors]) -> int:
    """How many of the leading `blocks` to link as parts (`saved`: the part each maps unwritten); the rest are
    written as one part. None below `MIN_LINK_ROWS` rows: a small table is written whole, as one file."""
    count = 0
    for part in saved[: len(blocks)]:
        if part is None or not part.unchanged():
            break
        count += 1
    if sum(len(b) for b in blocks[:count]) < max(MIN_LINK_ROWS, 1):
        return 0
    if count + (1 if len(blocks) > count else 0) > MAX_PARTS:
        count = MAX_PARTS - 2  # the trailing parts are written again with the new rows, as one part
    return count


def _names(role: str, index: int) -> tuple[str, str]:
    return part_name(role, index), key_name(role, index)


def link_parts(folder: Path, role: str, saved: Sequence[SavedPart]) -> dict[str, str] | None:
    """Hard-link `saved` into `folder` as `role`'s parts 0, 1, ... (vectors and keys); their checksums by name,
    or None (and no link left behind) when one cannot be linked."""
    sums: dict[str, str] = {}
    try:
        for index, part in enumerate(saved):
            for name, file in zip(_names(role, index), (part.vectors, part.keys)):
                os.link(file.path, folder / name)
                sums[name] = file.checksum
    except OSError:
        for name in sums:
            (folder / name).unlink(missing_ok=True)
        return None
    return sums


def _moved(folder: Path, name: str, sums: dict[str, str], file: SavedFile) -> SavedFile | None:
    """`file` as `folder / name` when that is the same inode with the same checksum (it was linked), else None."""
    if sums.get(name) != file.checksum:
        return None
    try:
        now = file_identity(folder / name)
    except OSError:
        return None
    return SavedFile(folder / name, file.checksum, now) if now[:3] == file.identity[:3] else None


def relocated(
    folder: Path, sums: dict[str, str], role: str, saved: Sequence[SavedPart | None]
) -> list[SavedPart | None]:
    """Where the mapped parts `saved` lie after a snapshot was written into `folder` with checksums `sums`: part i
    when its files of that number are the same inodes with the same checksums (they were linked), else None."""
    out: list[SavedPart | None] = []
    for index, part in enumerate(saved):
        moved = None
        if part is not None:
            names = _names(role, index)
            vectors, keys = _moved(folder, names[0], sums, part.vectors), _moved(folder, names[1], sums, part.keys)
            moved = SavedPart(vectors, keys) if vectors and keys else None
        out.append(moved)
    return out
