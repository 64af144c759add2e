"""Issue 10, defects 7 and 10 (storage): a memory whose records file is missing, emptied or damaged is refused
with a MemoryFormatError naming the problem (CLI: "engram: error: ...", exit 1), never opened as an empty
memory and never a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engram import Memory, MemoryFormatError
from engram.cli import main
from engram.embed import HashEmbedder
from helpers import build_small

PAGE = 4096


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small(tmp_path_factory.mktemp("built") / "m")


def copy(built: Path, tmp_path: Path) -> Path:
    path = tmp_path / "m"
    shutil.copytree(built, path)
    return path


def cli(path: Path, *args: str) -> int:
    return main([*args, "-m", str(path), "--embedder", "hash"])


@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_missing_or_empty_records_file_is_refused(
    built: Path, tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy(built, tmp_path)
    records = path / "engram.sqlite"
    if damage == "missing":
        records.unlink()
    else:
        records.write_bytes(b"")
    with pytest.raises(MemoryFormatError, match=r"engram\.sqlite"):
        Memory(path, embedder=HashEmbedder())
    assert cli(path, "stats") == 1
    err = capsys.readouterr().err
    assert err.startswith("engram: error:") and "engram.sqlite" in err and "Traceback" not in err
    assert records.exists() == (damage == "empty")  # nothing recreated
    assert cli(path, "retrieve", "Where was Alice born?") == 1


def test_records_file_that_is_not_sqlite_is_refused(built: Path, tmp_path: Path) -> None:
    path = copy(built, tmp_path)
    (path / "engram.sqlite").write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(MemoryFormatError, match="damaged"):
        Memory(path, embedder=HashEmbedder())


def test_corrupt_pages_give_a_message_not_a_traceback(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    size = (built / "engram.sqlite").stat().st_size
    refused = 0
    for page in range(size // PAGE):
        for fill in (b"\x00", b"\xa5"):
            path = tmp_path / f"p{page}-{fill.hex()}"
            shutil.copytree(built, path)
            data = bytearray((path / "engram.sqlite").read_bytes())
            data[page * PAGE + 10 : page * PAGE + 4000] = fill * 3990
            (path / "engram.sqlite").write_bytes(bytes(data))
            code = cli(path, "retrieve", "--method", "dense", "Where was Alice born?")
            err = capsys.readouterr().err
            assert code in (0, 1) and "Traceback" not in err
            if code == 1:
                assert "engram: error:" in err and "damaged" in err, err
                refused += 1
    assert refused >= 3
