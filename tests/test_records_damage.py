"""Issue 52, item 2: records changed outside engram are refused when the graph is built from them (the snapshot
under index/ is gone, or the store keeps none), never used to give other rankings with exit 0. A passage whose
text no longer gives its content hash, a cached vector with a changed byte, a dropped passages table and a
passage row deleted by hand (its document kept) each give a MemoryFormatError that names the damage and the way
out, through the library and the CLI (exit 1, no traceback)."""

from __future__ import annotations

import shutil
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram import Memory, MemoryFormatError
from engram.embed import HashEmbedder
from helpers import DOCS, EXTRACTIONS, cli_refused
from pg_fixture import pg_server, pg_url  # noqa: F401

QUESTION = "Where was Alice born?"
MESSAGE = "damaged.*index the documents into a new memory"


def change_text(db: Any) -> None:
    db.execute("UPDATE passages SET text = replace(text, 'Lyon', 'Lyan') WHERE id = 'alice'")


def change_vector(db: sqlite3.Connection) -> None:
    """One byte of one cached passage vector: the high byte of its first float (a flipped exponent bit)."""
    row, blob = db.execute("SELECT rowid, vector FROM embeddings WHERE role = 'passage' LIMIT 1").fetchone()
    data = bytearray(blob)
    data[3] ^= 0x40
    db.execute("UPDATE embeddings SET vector = ? WHERE rowid = ?", (bytes(data), row))
    assert struct.unpack("<f", bytes(data[:4]))[0] != struct.unpack("<f", blob[:4])[0]


def drop_passages(db: Any) -> None:
    db.execute("DROP TABLE passages")


def delete_passage(db: Any) -> None:
    db.execute("DELETE FROM passages WHERE id = 'alice'")


DAMAGE: dict[str, Callable[[Any], None]] = {
    "text": change_text,
    "vector": change_vector,
    "dropped table": drop_passages,
    "deleted row": delete_passage,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small memory, its embedding cache keeping the vectors the snapshot holds (whose damage is tested)."""
    path = tmp_path_factory.mktemp("built") / "m"
    with Memory(path, embedder=HashEmbedder(), config={"graph": {"keep_vector_cache": True}}) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
    return path


def damaged_copy(built: Path, tmp_path: Path, damage: str, snapshot: bool = False) -> Path:
    path = tmp_path / "m"
    shutil.copytree(built, path)
    if not snapshot:
        shutil.rmtree(path / "index")
    with sqlite3.connect(path / "engram.sqlite") as db:
        DAMAGE[damage](db)
    return path


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_records_are_refused_when_the_graph_is_rebuilt(
    built: Path, tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged_copy(built, tmp_path, damage)
    with pytest.raises(MemoryFormatError, match=MESSAGE), Memory(path, embedder=HashEmbedder()) as memory:
        memory.retrieve(QUESTION)
    for command in (["retrieve", QUESTION], ["stats"]):
        line = cli_refused(capsys, [*command, "-m", str(path), "--embedder", "hash"])
        assert "damaged" in line and "index the documents" in line


@pytest.mark.parametrize("damage", ["dropped table", "deleted row"])
def test_missing_passages_are_refused_with_the_snapshot_there(built: Path, tmp_path: Path, damage: str) -> None:
    path = damaged_copy(built, tmp_path, damage, snapshot=True)
    with pytest.raises(MemoryFormatError, match=MESSAGE), Memory(path, embedder=HashEmbedder()) as memory:
        memory.retrieve(QUESTION)


def test_undamaged_records_rebuild_as_before(built: Path, tmp_path: Path) -> None:
    path = tmp_path / "m"
    shutil.copytree(built, path)
    with Memory(path, embedder=HashEmbedder()) as memory:
        before = [(p.id, p.score) for p in memory.retrieve(QUESTION)[0].passages]
    shutil.rmtree(path / "index")
    with Memory(path, embedder=HashEmbedder()) as memory:
        assert [(p.id, p.score) for p in memory.retrieve(QUESTION)[0].passages] == before


@pytest.mark.parametrize("damage", ["text", "deleted row"])
def test_damaged_postgres_records_are_refused(pg_url: str, damage: str) -> None:  # noqa: F811
    import psycopg

    with Memory(pg_url, embedder=HashEmbedder()) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
    conninfo, schema = pg_url.rsplit("schema=", 1)
    with psycopg.connect(conninfo.rstrip("?&"), autocommit=True) as db:
        db.execute(f'SET search_path TO "{schema}"')
        DAMAGE[damage](db)
    with pytest.raises(MemoryFormatError, match=MESSAGE), Memory(pg_url, embedder=HashEmbedder()) as memory:
        memory.retrieve(QUESTION)
