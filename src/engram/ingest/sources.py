"""Reading documents from paths for the CLI: text files, HTML, PDF and DOCX documents (`engram.ingest.formats`),
folders of them and JSONL/JSON corpora."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engram.errors import InputError, MissingDependencyError
from engram.ingest.corpus import load_corpus
from engram.ingest.formats import DOCUMENT_SUFFIXES, file_id_of, page_id, read_document
from engram.types import Document

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
CORPUS_SUFFIXES = {".jsonl", ".json"}
MAX_FILE_VARIABLE = "ENGRAM_MAX_FILE_MB"
DEFAULT_MAX_FILE_MB = 50.0


# A document read from a folder carries the folder's absolute path under this metadata key: `engram sync`
# mirrors the documents of its folder, and `engram index` of that folder updates the same documents.
SYNC_KEY = "sync_root"


@dataclass
class Collected:
    documents: list[Document] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # path -> reason


def _visible_files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts):
            yield path


def max_file_bytes() -> int:
    """The largest text file read: $ENGRAM_MAX_FILE_MB megabytes, by default 50. A text of 50 MB is some 8
    million words, about 30,000 passages: hours of LLM extraction. A bigger file is more likely a log, a dump
    or a device than a document, and it is held in memory whole (its decoded text up to four times over)."""
    raw = os.environ.get(MAX_FILE_VARIABLE, "").strip()
    try:
        megabytes = float(raw) if raw else DEFAULT_MAX_FILE_MB
    except ValueError:
        megabytes = -1.0
    if not megabytes > 0 or megabytes == float("inf"):
        raise InputError(f"{MAX_FILE_VARIABLE}={raw!r} is not a size: give megabytes, e.g. 200")
    return int(megabytes * 1_000_000)


def read_text_file(path: Path) -> str:
    """The file's text; InputError when it is not a regular file (a device such as /dev/zero, a pipe), is
    larger than `max_file_bytes()`, looks binary or is not UTF-8."""
    if not path.is_file():
        raise InputError(f"{path} is not a regular file (a device, a pipe or a socket); only text files are read")
    limit = max_file_bytes()
    with path.open("rb") as handle:
        data = handle.read(limit + 1)  # never more, whatever the file's size says
    if len(data) > limit:
        raise InputError(
            f"{path} is larger than {limit / 1e6:g} MB, the most engram reads from one text file: split it, or "
            f"raise the limit with {MAX_FILE_VARIABLE}=MEGABYTES"
        )
    if b"\x00" in data[:8192]:
        raise InputError(f"{path} looks binary (NUL bytes); only text files are indexed")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); convert it first") from exc


def folder_documents(folder: Path, out: Collected) -> None:
    """The text files and documents (HTML, PDF, DOCX) of `folder` (recursively, hidden ones left out). A
    file's id is the folder's name, a slash and the file's path inside the folder (`notes/sub/a.md`), so that
    two folders that each hold `a.md` do not collide; a PDF's pages are documents of their own
    (`notes/paper.pdf#page=3`, see `add_file`). Other files, and files that cannot be read, are reported in
    `out.skipped`."""
    root = folder.resolve()
    listed = ", ".join(sorted(TEXT_SUFFIXES | DOCUMENT_SUFFIXES))
    for file in _visible_files(folder):
        if file.suffix.lower() not in TEXT_SUFFIXES | DOCUMENT_SUFFIXES:
            kind = f"{file.suffix} files are" if file.suffix else "files without an extension are"
            out.skipped[str(file)] = f"{kind} not read from folders (only {listed})"
            continue
        add_file(out, file, folder_id(folder, file), {SYNC_KEY: str(root)})


def folder_id(folder: Path, file: Path) -> str:
    """The id of `file`, read from `folder`: the folder's name, a slash and the file's path inside it."""
    name = folder.resolve().name
    return (f"{name}/" if name else "") + file.relative_to(folder).as_posix()


def collect(paths: list[str]) -> Collected:
    """Documents from files and folders. A folder's files get ids `FOLDERNAME/RELATIVE/PATH` (see
    `folder_documents`), a file given by itself its file name (a PDF's pages `NAME#page=N`); the title is the
    file's own title, else its stem; corpus rows keep their own ids."""
    out = Collected()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(f"{raw}: no such file or folder")
        if path.is_dir():
            folder_documents(path, out)
        elif not path.is_file():
            out.skipped[raw] = "not a regular file (a device, a pipe or a socket); only files and folders are read"
        elif path.suffix.lower() in CORPUS_SUFFIXES:
            out.documents.extend(load_corpus(path))
        else:
            add_file(out, path, path.name, {})
    return out


def add_file(out: Collected, path: Path, doc_id: str, extra: dict[str, str]) -> None:
    """The documents of one file, under `doc_id`, into `out` (or its path and the reason into `out.skipped`).

    A PDF gives one document per page with text, `DOC_ID#page=N` with `"page": N` in its metadata (and so in
    its passages'): chunks never mix two pages, every passage names its page, and a sync that finds a page gone
    deletes that page's document. The title is the one the file gives (HTML <title>, PDF and DOCX title),
    else the file stem."""
    meta = {"path": str(path.resolve()), **extra}
    if path.suffix.lower() not in DOCUMENT_SUFFIXES:
        try:
            text = read_text_file(path)
        except (InputError, OSError) as exc:
            out.skipped[str(path)] = str(exc)
            return
        out.documents.append(Document(doc_id, text, path.stem, meta))
        return
    try:
        limit = max_file_bytes()
        if path.stat().st_size > limit:  # a parser holds the whole file, and more, in memory
            raise InputError(
                f"{path} is larger than {limit / 1e6:g} MB, the most engram reads from one file: split it, or "
                f"raise the limit with {MAX_FILE_VARIABLE}=MEGABYTES"
            )
        parts = read_document(path)
    except (InputError, MissingDependencyError, OSError) as exc:
        out.skipped[str(path)] = str(exc)
        return
    for part in parts:
        title = part.title or path.stem
        if part.page is None:
            out.documents.append(Document(doc_id, part.text, title, meta))
        else:
            out.documents.append(Document(page_id(doc_id, part.page), part.text, title, {**meta, "page": part.page}))


def check_origins(documents: Iterable[Document], stored: Mapping[str, str]) -> None:
    """Refuse documents whose stored namesake (`stored`: id -> metadata JSON) was read from elsewhere: from
    another folder of the same name, or (a file given by itself, whose id is its file name) from another file of
    the same name. Re-indexing must never overwrite another folder's or file's document."""
    for doc in documents:
        if doc.id not in stored:
            continue
        before = json.loads(stored[doc.id])
        root, other = doc.metadata.get(SYNC_KEY), before.get(SYNC_KEY)
        if root is not None and other is not None and other != root:
            raise InputError(
                f"document {doc.id!r} was read from {other}, and {root} has the same folder name: rename one "
                "of the folders (ids are FOLDERNAME/PATH) or index it into another memory"
            )
        path, was = doc.metadata.get("path"), before.get("path")
        if root is None and other is None and _elsewhere(doc.id, path, was):
            raise InputError(
                f"document {doc.id!r} was read from {was}, and {path} has the same file name: index one of them "
                f"from a folder (ids are FOLDERNAME/PATH), delete the stored one first (engram delete {doc.id}), "
                "or index it into another memory"
            )


def _elsewhere(doc_id: str, path: object, was: object) -> bool:
    """Whether document `doc_id`, a file given by itself (its id is its file name), now comes from another file
    than before: both paths absolute (as `collect` stores them; a memory written before kept them as typed,
    which says nothing) and not the same."""
    if not isinstance(path, str) or not isinstance(was, str) or Path(path).name != file_id_of(doc_id):
        return False
    return Path(path).is_absolute() and Path(was).is_absolute() and path != was
