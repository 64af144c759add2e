"""The default embedder (all-MiniLM-L6-v2) with every vector it makes kept on disk, for benchmarks that need
real sentence vectors at a scale that takes an hour or more to embed on this machine.

A vector is filed by a hash of its role and text, in chunk files written atomically after each `embed` call
(`keys-NNNNNN.npy`, 16-byte keys, and `vectors-NNNNNN.npy`, float32 rows; a chunk counts only once both files
are in place, its vectors written first), so a run that is stopped keeps what it finished and the next run,
of any script, embeds only what is missing. The cache lives under ~/.cache/engram-bench/minilm/<model key>/
(or `folder`). `identity` is the model's own, so a memory built through the cache opens with the plain
default embedder too.

One folder takes one writing process at a time: chunk numbers are the next free one as this process saw it at
start, so two processes writing the same folder at once can write the same chunk (and its `.partial` files).
A second process can instead read another's folder without writing there (`read_also`: its chunks present at
start are read, and what neither holds is embedded and saved in `folder`).

    from vector_cache import CachedEmbedder
    embedder = CachedEmbedder()          # then Memory(path, embedder=embedder)
    embedder.seconds, embedder.embedded  # time spent and texts embedded by the model, per role
    read_cached(texts, "phrase")         # cached vectors only, read-only (no model; KeyError when one is missing)
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.embed.base import model_key
from engram.settings import resolve_embedder

Vectors = npt.NDArray[np.float32]


def default_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "engram-bench" / "minilm"


def text_key(role: str, text: str) -> bytes:
    return hashlib.blake2b(f"{role}\0{text}".encode(), digest_size=16).digest()


def read_cached(texts: Sequence[str], role: str, folder: Path | None = None) -> Vectors:
    """The cached vectors of `texts` (a row each), read from the complete chunks alone (a chunk's keys file is
    put in place after its vectors) without writing anything or loading the model, so it is safe while another
    process is filling the cache. KeyError when some text has no cached vector."""
    where = folder or default_folder() / model_key(resolve_embedder(None))
    wanted: dict[bytes, list[int]] = {}
    for i, text in enumerate(texts):
        wanted.setdefault(text_key(role, text), []).append(i)
    out = np.empty((len(texts), 0), dtype=np.float32)
    left = len(wanted)
    for keys_file in sorted(where.glob("keys-*.npy")):
        vectors_file = where / f"vectors-{keys_file.stem.split('-')[1]}.npy"
        keys = np.load(keys_file, allow_pickle=False)
        rows = [(r, wanted[k]) for r, k in enumerate(map(bytes, keys.tolist())) if k in wanted]
        if not rows:
            continue
        chunk = np.load(vectors_file, mmap_mode="r", allow_pickle=False)
        if out.shape[1] == 0:
            out = np.full((len(texts), chunk.shape[1]), np.nan, dtype=np.float32)
        for r, at in rows:
            out[at] = chunk[r]
        left -= len(rows)
    if left > 0 or np.isnan(out).any() or out.shape[1] == 0:
        raise KeyError(f"{left:,} of {len(wanted):,} {role} texts have no vector in {where}")
    return out


class CachedEmbedder:
    """The default embedder behind an on-disk cache of its vectors (see the module docstring)."""

    def __init__(self, folder: Path | None = None, read_also: Sequence[Path] = ()) -> None:
        self.inner = resolve_embedder(None)
        self.folder = (folder or default_folder()) / model_key(self.inner)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._rows: dict[bytes, tuple[int, int]] = {}  # key -> (chunk, row); read-only folders' chunks are < 0
        self._chunks: dict[int, Vectors] = {}
        self.seconds: dict[str, float] = {}
        self.embedded: dict[str, int] = {}
        for i, other in enumerate(read_also):  # first, so this folder's own rows win where both hold a text
            self._read(other / model_key(self.inner), -(i + 1) << 32)
        self._next = self._read(self.folder, 0)

    def _read(self, folder: Path, base: int) -> int:
        """File the complete chunks of `folder` under `base` + their number; the next free number there."""
        numbers = [-1]
        for keys_file in sorted(folder.glob("keys-*.npy")):
            number = int(keys_file.stem.split("-")[1])
            vectors_file = folder / f"vectors-{number:06d}.npy"
            if not vectors_file.exists():
                continue
            numbers.append(number)
            vectors, keys = np.load(vectors_file, mmap_mode="r"), np.load(keys_file)
            if len(vectors) != len(keys):  # two writers' files of one chunk number: neither is trusted
                continue
            self._chunks[base + number] = vectors
            for row, key in enumerate(keys.tolist()):
                self._rows[bytes(key)] = (base + number, row)
        return max(numbers) + 1

    @property
    def identity(self) -> dict[str, Any]:
        return self.inner.identity

    @property
    def dim(self) -> int:
        return self.inner.dim

    def __len__(self) -> int:
        return len(self._rows)

    def embed(self, texts: Sequence[str], role: Any = "passage", progress: Any = None) -> Vectors:
        keys = [hashlib.blake2b(f"{role}\0{t}".encode(), digest_size=16).digest() for t in texts]
        missing = sorted({k: i for i, k in enumerate(keys) if k not in self._rows}.values())
        if missing:
            start = time.perf_counter()
            fresh = np.asarray(self.inner.embed([texts[i] for i in missing], role=role), dtype=np.float32)
            self.seconds[role] = self.seconds.get(role, 0.0) + time.perf_counter() - start
            self.embedded[role] = self.embedded.get(role, 0) + len(missing)
            self._save([keys[i] for i in missing], fresh)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, key in enumerate(keys):
            chunk, row = self._rows[key]
            out[i] = self._chunks[chunk][row]
        if progress is not None:
            progress(len(texts))
        return out

    def _save(self, keys: list[bytes], vectors: Vectors) -> None:
        chunk = self._next
        self._next += 1
        key_rows = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, 16)
        for name, array in ((f"vectors-{chunk:06d}.npy", vectors), (f"keys-{chunk:06d}.npy", key_rows)):
            partial = self.folder / f".{name}.partial"
            with open(partial, "wb") as handle:
                np.save(handle, array)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, self.folder / name)
        self._chunks[chunk] = vectors
        for row, key in enumerate(keys):
            self._rows[key] = (chunk, row)
