"""The memories a server holds open, by name, each with its writer lock.

`--root DIR`: every memory directory under DIR is served under its folder name, and a write to an unknown
name creates it. `--memory DIR`: that one memory, under the name `default`. Memories open on first use and
stay open (their indexes stay loaded) until the server stops.

One writer per memory: writes (index, update, delete, jobs) hold the memory's lock, so they are applied one
after another; reads take no server lock (the library gives every read a consistent committed generation).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from engram.embed.base import Embedder
from engram.llm.base import ChatModel
from engram.memory import Memory
from engram.server.errors import bad_input, not_found
from engram.server.settings import ServerSettings
from engram.settings import embedder_spec, resolve_embedder, resolve_llm

DEFAULT = "default"
MANIFEST = "manifest.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: str) -> str:
    """A memory name is a folder name: letters, digits, `_`, `-` and `.`, not starting with `.`, no `..`,
    at most 64 characters. Anything else (a path, `..`) is refused before the file system sees it."""
    if not _NAME.fullmatch(name) or ".." in name:
        raise bad_input(
            f"invalid memory name {name!r}: use 1-64 letters, digits, '_', '-' or '.', starting with a letter "
            "or digit (no '/', no '..')"
        )
    return name


@dataclass
class Handle:
    name: str
    memory: Memory
    writer: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def writing(self) -> Iterator[Memory]:
        with self.writer:
            yield self.memory


class Registry:
    """Thread-safe map of open memories."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self._open: dict[str, Handle] = {}
        self._embedders: dict[str, Embedder] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        if self.settings.memory is not None:
            return [DEFAULT]
        root = self.settings.root
        assert root is not None  # ServerSettings holds one of the two
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file() and _NAME.fullmatch(p.name))

    def path_of(self, name: str) -> Path | str:
        check_name(name)
        if self.settings.memory is not None:
            if name != DEFAULT:
                raise not_found(f"no memory named {name!r}: this server serves one memory, named 'default'")
            return self.settings.memory
        assert self.settings.root is not None
        return self.settings.root / name

    def get(self, name: str, create: bool = False) -> Handle:
        """The open memory `name`; unknown names are 404 unless `create` (a write)."""
        path = self.path_of(name)
        with self._lock:
            handle = self._open.get(name)
            if handle is not None:
                return handle
            exists = isinstance(path, str) or (path / MANIFEST).is_file()  # str: a PostgreSQL URL
            if not exists and not create:
                raise not_found(f"no memory named {name!r}: write documents to it to create it")
            memory = Memory(path, embedder=self._embedder(path), llm=self._llm(path), create=create)
            handle = self._open[name] = Handle(name, memory)
            return handle

    def _embedder(self, target: Path | str) -> Embedder:
        """One embedder object per spec, shared by the memories that use it (a model loads once); each memory's
        spec as the CLI resolves it, so a memory opens with the embedder it was written with."""
        path = target if isinstance(target, Path) else None  # a PostgreSQL memory has no config.json
        spec = embedder_spec(self.settings.embedder, path)
        key = spec or "minilm"
        if key not in self._embedders:
            self._embedders[key] = resolve_embedder(spec, path)
        return self._embedders[key]

    def _llm(self, target: Path | str) -> ChatModel | None:
        """The LLM from --llm-* options; None lets `Memory` resolve (and own) the one its settings name."""
        s = self.settings
        if s.llm_base_url is None and s.llm_model is None and s.llm_concurrency is None:
            return None
        path = target if isinstance(target, Path) else None
        return resolve_llm(path, s.llm_base_url, s.llm_model, max_concurrency=s.llm_concurrency) or None

    def close(self) -> None:
        with self._lock:
            handles, self._open = list(self._open.values()), {}
        for handle in handles:
            with handle.writer:
                handle.memory.close()
