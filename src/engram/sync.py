"""Mirroring a folder into a memory: new files indexed, changed files updated, removed files deleted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engram.errors import InputError
from engram.ingest import document_hash
from engram.memory import Memory, Progress
from engram.sources import collect
from engram.types import Document

SYNC_KEY = "sync_root"


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


def sync_folder(memory: Memory, folder: str | Path, progress: Progress | None = None) -> SyncReport:
    """Make the memory's documents from `folder` equal the folder's text files. Documents are identified by
    their path relative to the folder and carry `sync_root` (the folder's absolute path) in their metadata;
    documents from elsewhere are never touched. A renamed file is a deletion plus an addition whose extraction
    and vectors come from the caches (no LLM call, no embedding). Each step commits on its own, so an
    interrupted sync leaves a consistent memory and a re-run finishes it."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{folder} is not a folder: `engram sync` mirrors a folder")
    scope = str(root.resolve())
    collected = collect([str(root)])
    docs = [Document(d.id, d.text, d.title, {**d.metadata, SYNC_KEY: scope}) for d in collected.documents]
    stored = memory.documents()
    foreign = sorted(d.id for d in docs if d.id in stored and stored[d.id].get(SYNC_KEY) != scope)
    if foreign:
        raise InputError(f"documents {foreign[:3]} already exist in this memory from elsewhere: use another memory")
    mine = {i for i, meta in stored.items() if meta.get(SYNC_KEY) == scope}
    hashes = memory._store.document_hashes()
    report = SyncReport(skipped=dict(collected.skipped))
    report.deleted = sorted(mine - {d.id for d in docs})
    if report.deleted:
        memory.delete(report.deleted)
    new = [d for d in docs if d.id not in mine]
    if new:
        memory.index(new, progress=progress)
        report.added = [d.id for d in new]
    for doc in docs:
        if doc.id in mine:
            if hashes.get(doc.id) == document_hash(doc):
                report.unchanged += 1
            else:
                memory.update(doc)
                report.updated.append(doc.id)
    return report
