"""Planning a folder mirror: which documents to add, update and delete so that a memory's documents from a
folder equal the folder's text files and documents. Pure: it reads the folder and the stored (metadata, hash) of each
document; `Memory.sync` applies the plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.errors import InputError
from engram.ingest.formats import file_id_of
from engram.ingest.prepare import document_hash
from engram.ingest.sources import SYNC_KEY, collect, folder_id
from engram.types import Document


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    # extraction by the LLM during the sync (new passages, and failed ones retried); its usage
    extracted: int = 0
    failed: int = 0
    llm: dict[str, int] = field(default_factory=dict)


@dataclass
class SyncPlan:
    add: list[Document] = field(default_factory=list)
    update: list[Document] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


def plan_sync(folder: str | Path, metadata: Mapping[str, Mapping[str, Any]], hashes: Mapping[str, str]) -> SyncPlan:
    """Documents are identified as `engram index` identifies them (`FOLDERNAME/PATH`, see
    `engram.ingest.sources.folder_documents`) and carry `sync_root` (the folder's absolute path) in their
    metadata, so a sync adopts what `engram index FOLDER` stored; documents from elsewhere are never touched.
    A renamed file is a deletion plus an addition whose extraction and vectors come from the caches."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{folder} is not a folder: `engram sync` mirrors a folder")
    scope = str(root.resolve())
    collected = collect([str(root)])
    docs = collected.documents
    foreign = sorted(d.id for d in docs if d.id in metadata and metadata[d.id].get(SYNC_KEY) != scope)
    if foreign:
        raise InputError(
            f"documents {foreign[:3]} already exist in this memory from elsewhere (another folder named "
            f"{root.resolve().name!r}, or added by hand): rename the folder or use another memory"
        )
    mine = {i for i, meta in metadata.items() if meta.get(SYNC_KEY) == scope}
    plan = SyncPlan(skipped=dict(collected.skipped))
    kept = _skipped_ids(root, collected.skipped)  # a file there but unreadable is kept, all its PDF pages too
    present = {d.id for d in docs} | {i for i in mine if file_id_of(i) in kept}
    plan.delete = sorted(mine - present)
    plan.add = [d for d in docs if d.id not in mine]
    for doc in docs:
        if doc.id in mine:
            if hashes.get(doc.id) == document_hash(doc):
                plan.unchanged += 1
            else:
                plan.update.append(doc)
    return plan


def _skipped_ids(root: Path, skipped: Mapping[str, str]) -> set[str]:
    """The ids the files of `root` that were skipped (unreadable, binary, not UTF-8, a PDF or DOCX without the
    `docs` extra) would have: their file is still there, so their stored version is kept, as an emptied file's
    is (a PDF's pages are matched by `file_id_of`)."""
    out = set()
    for path in skipped:
        try:
            out.add(folder_id(root, Path(path)))
        except ValueError:  # not under `root`
            continue
    return out
