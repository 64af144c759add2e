"""Server settings and API keys.

API keys come from `ENGRAM_API_KEYS` and/or a key file (`--api-key-file`). Both hold entries of the form

    KEY [memories=NAME,NAME...] [read-only]

one per line in the file (blank lines and lines starting with `#` are ignored), separated by `;` or newlines
in the variable. KEY is at least 16 characters without spaces. `memories=` limits the key to those memories
(default: all); `read-only` lets it retrieve, answer and read but never write. Example file:

    # team keys
    3f9c0a7e5b2d4c18a6e2  memories=notes,todo
    b71d2e4490c3af55e0d1  read-only
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from engram.errors import InputError

MIN_KEY_LENGTH = 16
DEFAULT_MAX_BODY = 16 * 1024 * 1024
DEFAULT_BODY_TIMEOUT = 30.0  # seconds a request's whole body may take to arrive


@dataclass(frozen=True)
class ApiKey:
    """One accepted key. `memories` None: every memory. `label` names the key in logs (never the key)."""

    secret: str = field(repr=False)
    label: str
    memories: frozenset[str] | None = None
    read_only: bool = False

    def may_read(self, memory: str) -> bool:
        return self.memories is None or memory in self.memories

    def may_write(self, memory: str) -> bool:
        return not self.read_only and self.may_read(memory)


@dataclass
class ServerSettings:
    """What `engram serve` / `engram mcp` run with. Exactly one of `root` (every memory under a folder, by
    name) and `memory` (one memory, served as `default`)."""

    root: Path | None = None
    memory: Path | str | None = None  # str: a postgresql:// URL
    host: str = "127.0.0.1"
    port: int = 8300
    keys: list[ApiKey] = field(default_factory=list)
    max_body: int = DEFAULT_MAX_BODY
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    docs: bool = False  # serve the OpenAPI schema at /openapi.json (behind the keys, like every route)
    embedder: str | None = None
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_concurrency: int | None = None
    job_workers: int = 2
    request_threads: int = field(default_factory=lambda: max(8, 8 * (os.cpu_count() or 1)))

    def __post_init__(self) -> None:
        if (self.root is None) == (self.memory is None):
            raise InputError("give exactly one of --memory DIR (one memory) or --root DIR (a memory per name)")
        if self.request_threads < 1:
            raise InputError("--threads must be at least 1")
        if self.max_body < 1024:
            raise InputError("--max-body must be at least 1024 bytes")
        if not self.body_timeout > 0:
            raise InputError("--body-timeout must be a positive number of seconds")


def parse_key_entries(text: str, origin: str) -> list[ApiKey]:
    """Keys from entries (see the module docstring); `origin` names the source in error messages."""
    keys = []
    for number, raw in enumerate(text.replace(";", "\n").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keys.append(_parse_entry(line, f"{origin} entry {number}"))
    return keys


def _parse_entry(line: str, where: str) -> ApiKey:
    secret, *options = line.split()
    if len(secret) < MIN_KEY_LENGTH:
        raise InputError(f"{where}: a key must be at least {MIN_KEY_LENGTH} characters")
    memories: frozenset[str] | None = None
    read_only = False
    for option in options:
        if option in ("read-only", "readonly", "ro"):
            read_only = True
        elif option.startswith("memories="):
            memories = frozenset(n for n in option.removeprefix("memories=").split(",") if n)
        else:
            raise InputError(f"{where}: unknown option {option!r}; use memories=NAME,NAME or read-only")
    return ApiKey(secret, where, memories, read_only)


def load_keys(key_file: str | Path | None, environ: dict[str, str] | None = None) -> list[ApiKey]:
    """Keys from $ENGRAM_API_KEYS and the key file, if any."""
    env = os.environ if environ is None else environ
    keys = parse_key_entries(env.get("ENGRAM_API_KEYS", ""), "ENGRAM_API_KEYS")
    if key_file is not None:
        path = Path(key_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read the API key file {path}: {exc.strerror}") from exc
        keys += parse_key_entries(text, str(path))
    return keys


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: list[ApiKey]) -> None:
    """Refuse to serve beyond this machine without keys: anyone who can reach the port could read and
    change every memory."""
    if not keys and not is_loopback(host):
        raise InputError(
            f"refusing to listen on {host} without API keys: anyone who reaches that address could read and "
            "change the memories. Set ENGRAM_API_KEYS or --api-key-file, or bind to 127.0.0.1"
        )
