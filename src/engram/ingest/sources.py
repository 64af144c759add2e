"""Reading documents from paths for the CLI: text files, folders and JSONL/JSON corpora."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engram.errors import InputError
from engram.ingest.corpus import load_corpus
from engram.types import Document

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
CORPUS_SUFFIXES = {".jsonl", ".json"}


@dataclass
class Collected:
    documents: list[Document] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # path -> reason


def _text_files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if (
            path.is_file()
            and path.suffix.lower() in TEXT_SUFFIXES
            and not any(part.startswith(".") for part in path.relative_to(folder).parts)
        ):
            yield path


def read_text_file(path: Path) -> str:
    """The file's text; InputError when it looks binary or is not UTF-8."""
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise InputError(f"{path} looks binary (NUL bytes); only text files are indexed")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); convert it first") from exc


def collect(paths: list[str]) -> Collected:
    """Documents from files and folders. A text file's id is its path relative to the folder given (or its
    name), its title the file stem; corpus rows keep their own ids."""
    out = Collected()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(f"{raw}: no such file or folder")
        if path.is_dir():
            for file in _text_files(path):
                _add_text(out, file, file.relative_to(path).as_posix())
        elif path.suffix.lower() in CORPUS_SUFFIXES:
            out.documents.extend(load_corpus(path))
        else:
            _add_text(out, path, path.name)
    return out


def _add_text(out: Collected, path: Path, doc_id: str) -> None:
    try:
        text = read_text_file(path)
    except (InputError, OSError) as exc:
        out.skipped[str(path)] = str(exc)
        return
    out.documents.append(Document(doc_id, text, path.stem, {"path": str(path)}))
