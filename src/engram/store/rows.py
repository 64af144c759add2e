"""The rows every store backend returns (a passage with its document's metadata, an extraction) and the
per-key column lookup both backends hand out."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from engram.errors import MemoryFormatError


@dataclass(frozen=True)
class PassageRow:
    id: str
    doc_id: str
    title: str | None
    text: str
    content_hash: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class ExtractionRow:
    """`source` names who made it: an LLM extractor's identity ("MODEL PROMPT-VERSION"), "import:..." or the
    offline extractor's identity. `linked`: a commit put this version of the row into the graph (a row stored
    by a run stopped before its commit is not, and its passage stays pending there); `attempts` counts the
    row's writes, so a commit links only the version it read."""

    status: str
    entities: list[str]
    triples: list[list[Any]]
    error: str | None
    source: str = ""
    linked: bool = True
    attempts: int = 0


@dataclass(frozen=True)
class Claimed:
    """What one claim for extraction work got (`Store.claim_extractions`), by content hash: `taken` now leased to
    the claiming worker; `gone` changed since the worker read them (another worker extracted them, or it failed
    them): never to be sent again by this worker; `held` leased to other workers: content hash -> (that
    worker, seconds left on its lease). A wanted hash in none of these was free but past the claim's limit, or
    was being claimed by another worker at that moment: ask again."""

    taken: list[str]
    gone: list[str]
    held: dict[str, tuple[str, float]]


class ColumnLookup(Mapping[str, str]):
    """A read-only view of one key -> value column that queries per key: membership tests and lookups of a few
    keys cost a few indexed SELECTs instead of reading the whole table (inserts into a large memory). `read`
    runs a query with parameters; `mark` is the backend's parameter placeholder ("?" or "%s")."""

    def __init__(self, read: Callable[[str, tuple[Any, ...]], list[Any]], mark: str, table: str, key: str,
                 value: str) -> None:  # fmt: skip
        self._read, self._mark, self._table, self._key, self._value = read, mark, table, key, value

    def __getitem__(self, key: str) -> str:
        rows = self._read(f"SELECT {self._value} FROM {self._table} WHERE {self._key} = {self._mark}", (key,))
        if not rows:
            raise KeyError(key)
        return str(rows[0][0])

    def __iter__(self) -> Iterator[str]:
        return iter([str(r[0]) for r in self._read(f"SELECT {self._key} FROM {self._table}", ())])

    def __len__(self) -> int:
        return int(self._read(f"SELECT COUNT(*) FROM {self._table}", ())[0][0])


def parse_generation(value: object, where: str) -> int:
    """The commit counter `meta.generation` as a number; any other value means the records were damaged (a
    hand edit, a bad restore), and building on it would number commits wrongly."""
    if value is None:
        return 0
    try:
        number = int(str(value))
    except ValueError:
        number = -1
    if number < 0:
        raise MemoryFormatError(
            f"{where} is damaged: its meta table holds generation {str(value)[:40]!r}, not a commit number; "
            "restore it from a backup, or index the documents into a new memory"
        )
    return number
