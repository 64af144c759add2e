"""Vector files of a snapshot in parts, so a close after a few changes writes only the rows added since.

A role's rows (passage, phrase or fact vectors) may lie in several files, one after another: part 0 is
`{role}.npy`, part i > 0 `{role}.{i}.npy`; a snapshot's parts are the ones its manifest lists, numbered from 0
without a gap. Rows never move and vectors never change, so the rows a process mapped from the snapshot it opened
are, file for file, leading parts of the next snapshot: writing that one hard-links those files (same inode, so
the same bytes and the checksum already in the manifest it was opened from) and writes the rows added since as
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
IntArray = npt.NDArray[np.int64]
MAX_PARTS = 8
MIN_LINK_ROWS = 16_384  # fewer saved rows than this (24 MiB at 384 dimensions) are written again, not linked


def part_name(role: str, index: int) -> str:
    return f"{role}.npy" if index == 0 else f"{role}.{index}.npy"


def part_names(sums: dict[str, str], role: str) -> list[str]:
    """The files of `role`'s parts that a manifest's checksums list, in row order (part 0 first; none when the
    manifest lacks part 0)."""
    out: list[str] = []
    while part_name(role, len(out)) in sums:
        out.append(part_name(role, len(out)))
    return out


def _identity(path: Path) -> tuple[int, int, int, int]:
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
        return cls(path, checksum, _identity(path))

    def unchanged(self) -> bool:
        """Whether `path` is still the file that was mapped."""
        try:
            return _identity(self.path) == self.identity
        except OSError:
            return False


def linkable(saved: Sequence[SavedFile | None], blocks: Sequence[Vectors]) -> int:
    """How many of the leading `blocks` to link as parts (`saved`: the file each maps unwritten); the rest are
    written as one part. None below `MIN_LINK_ROWS` rows: a small table is written whole, as one file."""
    count = 0
    for file in saved[: len(blocks)]:
        if file is None or not file.unchanged():
            break
        count += 1
    if sum(len(b) for b in blocks[:count]) < max(MIN_LINK_ROWS, 1):
        return 0
    if count + (1 if len(blocks) > count else 0) > MAX_PARTS:
        count = MAX_PARTS - 2  # the trailing parts are written again with the new rows, as one part
    return count


def link_parts(folder: Path, role: str, saved: Sequence[SavedFile]) -> dict[str, str] | None:
    """Hard-link `saved` into `folder` as `role`'s parts 0, 1, ...; their checksums by name, or None (and no link
    left behind) when one cannot be linked."""
    sums: dict[str, str] = {}
    try:
        for index, file in enumerate(saved):
            os.link(file.path, folder / part_name(role, index))
            sums[part_name(role, index)] = file.checksum
    except OSError:
        for name in sums:
            (folder / name).unlink(missing_ok=True)
        return None
    return sums


def relocated(
    folder: Path, sums: dict[str, str], role: str, saved: Sequence[SavedFile | None]
) -> list[SavedFile | None]:
    """Where the mapped parts `saved` lie after a snapshot was written into `folder` with checksums `sums`: part i
    when the file of that name is the same inode with the same checksum (it was linked), else None."""
    out: list[SavedFile | None] = []
    for index, file in enumerate(saved):
        name, moved = part_name(role, index), None
        if file is not None and sums.get(name) == file.checksum:
            try:
                now = _identity(folder / name)
            except OSError:
                now = None
            if now is not None and now[:3] == file.identity[:3]:
                moved = SavedFile(folder / name, file.checksum, now)
        out.append(moved)
    return out


class JoinedRows:
    """Row gathers over matrices that follow each other (a snapshot's parts), without stacking them."""

    def __init__(self, parts: Sequence[Vectors]) -> None:
        self.parts = list(parts)
        self.starts = np.cumsum([0, *(len(p) for p in self.parts)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, rows: IntArray) -> Vectors:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(self.parts) == 1:
            out: Vectors = self.parts[0][rows]
            return out
        dim = self.parts[0].shape[1]
        out = np.empty((len(rows), dim), dtype=np.float32)
        which = np.searchsorted(self.starts, rows, side="right") - 1
        for index, part in enumerate(self.parts):
            hit = which == index
            if hit.any():
                out[hit] = part[rows[hit] - self.starts[index]]
        return out
