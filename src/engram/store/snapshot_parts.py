"""Vector files of a snapshot in parts, so a close after a few changes writes only the rows added since.

A role's rows (passage, phrase or fact vectors) may lie in several files, one after another: part 0 is
`{role}.npy`, part i > 0 `{role}.{i}.npy`, each with its rows' keys (text hashes) in `{role}-keys.bin` /
`{role}-keys.{i}.bin` (32-byte SHA-256 digests; `.json` lists of hex digests in parts written before, still read
and linked as they are); a snapshot's parts are the ones its manifest lists, numbered from 0 without a gap. Rows
never move and vectors never change, so the rows a process mapped from the snapshot it opened are, file for
file, leading parts of the next snapshot: writing that one hard-links those files (same inodes, so the same bytes
and the checksums already in the manifest it was opened from) and writes the rows added since, and their keys, as
one new part. A file that is not the one mapped any more (replaced, another inode or size) or that cannot be
linked (a file system without hard links) is written out instead. At most `MAX_PARTS` parts: past that, the
trailing ones are written again with the new rows as one part. A table of fewer than `MIN_LINK_ROWS` saved rows
is written whole, as one file: rewriting it costs little.
"""

from __future__ import annotations

import json
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


KEYS_BINARY, KEYS_JSON = ".bin", ".json"  # keys files: 32-byte SHA-256 digests (written now); a JSON list of hex
DIGEST = 32


def key_name(role: str, index: int, suffix: str = KEYS_BINARY) -> str:
    """The file of part `index`'s keys (the rows' text hashes: binary digests, or a JSON list written before)."""
    return f"{role}-keys{suffix}" if index == 0 else f"{role}-keys.{index}{suffix}"


def listed_key_name(sums: dict[str, str], role: str, index: int) -> str:
    """The keys file of part `index` that a manifest's checksums list (binary or JSON; the binary name when
    neither is listed)."""
    json_name = key_name(role, index, KEYS_JSON)
    return json_name if json_name in sums and key_name(role, index) not in sums else key_name(role, index)


def keys_bytes(keys: Sequence[str]) -> bytes:
    """Text hashes (SHA-256 hex digests) as a binary keys file holds them: 32 bytes each, in row order."""
    return bytes.fromhex("".join(keys))


def hex_keys(data: bytes) -> list[str]:
    """The hex digests of a binary keys file's bytes (ValueError when they are not whole digests)."""
    if len(data) % DIGEST:
        raise ValueError(f"a keys file of {len(data)} bytes is not whole {DIGEST}-byte digests")
    text = data.hex()
    return [text[i : i + 2 * DIGEST] for i in range(0, len(text), 2 * DIGEST)]


def read_keys(path: Path) -> list[str]:
    """The text hashes of a keys file, binary or JSON (ValueError when it holds something else)."""
    if path.suffix == KEYS_BINARY:
        return hex_keys(path.read_bytes())
    keys = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"{path.name} is not a list of keys")
    return keys


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


def _names(role: str, index: int, part: SavedPart) -> tuple[str, str]:
    """The names of `part`'s files as part `index` (its keys file keeps its kind: binary, or JSON)."""
    return part_name(role, index), key_name(role, index, part.keys.path.suffix)


def link_parts(folder: Path, role: str, saved: Sequence[SavedPart]) -> dict[str, str] | None:
    """Hard-link `saved` into `folder` as `role`'s parts 0, 1, ... (vectors and keys); their checksums by name,
    or None (and no link left behind) when one cannot be linked."""
    sums: dict[str, str] = {}
    try:
        for index, part in enumerate(saved):
            for name, file in zip(_names(role, index, part), (part.vectors, part.keys)):
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
            names = _names(role, index, part)
            vectors, keys = _moved(folder, names[0], sums, part.vectors), _moved(folder, names[1], sums, part.keys)
            moved = SavedPart(vectors, keys) if vectors and keys else None
        out.append(moved)
    return out
