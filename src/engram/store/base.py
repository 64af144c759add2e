"""The store contract: what the rooms above (index, extract, llm) call on a memory's records.

Two backends satisfy it: `engram.store.records.RecordStore` (SQLite, the memory directory's engram.sqlite) and
`engram.store.postgres.PostgresStore` (PostgreSQL with pgvector, one schema per memory). Writes that belong to
one commit take the open transaction `Tx` that `transaction()` yields (a sqlite3 or psycopg connection: callers
only pass it on, never use it); the other writes commit on their own. See docs/format.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from engram.store.rows import Claimed, ExtractionRow, PassageRow

Tx = Any  # the open transaction of a store: passed to its own write methods only
LOG_KEPT = 1000  # generations whose changes the commit log keeps (older rows are deleted by each commit)
# rows that point at rows not there (a passage, chunk or document row deleted outside engram): the same SQL on
# both backends, at most a few named each; `Store.dangling_rows` runs them when the graph is built from the records
DANGLING = (
    (
        "a chunk of document {} names passage {}, which is missing",
        "SELECT c.doc_id, c.passage_id FROM chunks c LEFT JOIN passages p ON p.id = c.passage_id WHERE p.id IS NULL",
    ),
    (
        "passage {} names document {}, which is missing",
        "SELECT p.id, p.doc_id FROM passages p LEFT JOIN documents d ON d.id = p.doc_id WHERE d.id IS NULL",
    ),
    (
        "document {} has no passage{}",
        "SELECT d.id, '' FROM documents d LEFT JOIN chunks c ON c.doc_id = d.id WHERE c.doc_id IS NULL",
    ),
)


class Store(Protocol):
    """A memory's records: documents, chunks, passages, extractions, embeddings, synonym lists, the LLM
    response cache and usage totals, and meta values (the generation counter among them)."""

    location: str  # where the records live, for messages (a file path, or a database URL without password)
    shared: bool  # several machines may open it at once (no local files beside it)

    def close(self) -> None: ...
    def transaction(self) -> AbstractContextManager[Tx]: ...
    def turn(self) -> AbstractContextManager[None]:
        """Hold the memory's write turn across processes: other processes' transactions wait until it ends."""
        ...

    # meta and the generation counter
    def get_meta(self, key: str, default: str | None = None) -> str | None: ...
    def set_meta(self, db: Tx, key: str, value: str) -> None: ...
    @property
    def generation(self) -> int: ...
    def locked_generation(self, db: Tx) -> int:
        """The committed generation, read inside `db` so that no other writer can commit until `db` ends."""
        ...

    # documents, chunks, passages
    def document_hashes(self) -> dict[str, str]: ...
    def document_metadata(self) -> dict[str, dict[str, Any]]: ...
    def document_lookup(self) -> Mapping[str, str]: ...
    def document_metadata_lookup(self) -> Mapping[str, str]: ...
    def passage_lookup(self) -> Mapping[str, str]: ...
    def passage_ids(self) -> set[str]: ...
    def add_document(self, db: Tx, doc_id: str, title: str | None, metadata: dict[str, Any], digest: str) -> None: ...
    def add_chunk(self, db: Tx, doc_id: str, idx: int, passage_id: str) -> None: ...
    def add_passage(self, db: Tx, row: PassageRow) -> None: ...
    def passages(self) -> list[PassageRow]: ...
    def passages_by_id(self, ids: Sequence[str]) -> list[PassageRow]:
        """The stored passages among `ids` (those not stored are left out), ordered by id."""
        ...
    def counts(self) -> dict[str, int]: ...
    def chunk_passages(self, doc_ids: Sequence[str]) -> dict[str, list[str]]: ...
    def delete_documents(self, db: Tx, doc_ids: Sequence[str], passage_ids: Sequence[str]) -> None: ...
    def dangling_rows(self) -> list[str]:
        """What `DANGLING` finds (empty for records engram wrote), described, a few of each kind."""
        ...

    # extractions
    def extractions(self) -> dict[str, ExtractionRow]: ...
    def extractions_for(self, hashes: Sequence[str]) -> dict[str, ExtractionRow]: ...
    def put_extractions(
        self,
        rows: Iterable[tuple[str, Sequence[str], Sequence[Sequence[Any]], int]],
        source: str,
        claim: str | None = None,
    ) -> None:
        """Record finished extractions; with `claim`, that worker's claims on them go in the same transaction."""
        ...
    def put_failure(self, digest: str, error: str, source: str, claim: str | None = None) -> None: ...
    def link_extractions(self, db: Tx, rows: Mapping[str, ExtractionRow]) -> None:
        """Mark the versions of `rows` that a commit read as in the graph (in that commit's transaction): rows
        stored by a run stopped before its commit stay unlinked, and a load keeps their passages pending."""
        ...

    # claims on extraction work: leases by content hash, so that concurrent workers never extract one twice
    def claim_extractions(self, worker: str, wanted: Sequence[tuple[str, int]], limit: int, lease: float) -> Claimed:
        """Lease to `worker`, for `lease` seconds, up to `limit` of `wanted` (content hash, the attempts of its
        extraction row the worker read, 0 for none): those whose row is unchanged and that no other worker
        holds an unexpired lease on. Atomic against every other claimer, in any process."""
        ...
    def renew_claims(self, worker: str, hashes: Sequence[str], lease: float) -> None:
        """Push `worker`'s leases on `hashes` to `lease` seconds from now; never blocked by the write turn."""
        ...
    def release_claims(self, worker: str, hashes: Sequence[str] | None = None) -> None:
        """Drop `worker`'s claims on `hashes` (None: all of them)."""
        ...

    # embeddings (float32 bytes by text hash)
    def put_vectors(self, model: str, role: str, hashes: Iterable[str], vectors: npt.NDArray[np.float32]) -> None: ...
    def vectors_for(self, model: str, role: str, hashes: Sequence[str]) -> dict[str, bytes]: ...
    def drop_vectors(self, model: str, role: str, hashes: Iterable[str]) -> None:
        """Remove the cached vectors of `hashes` (a snapshot holds them now) and give their space back."""
        ...

    # synonym lists
    def synonym_lists(self) -> dict[str, list[tuple[str, float]]]: ...
    def write_synonyms(self, db: Tx, lists: dict[str, list[tuple[str, float]]]) -> None: ...
    def synonym_lists_for(self, phrases: Sequence[str]) -> dict[str, list[tuple[str, float]]]:
        """The stored lists of `phrases` (a phrase without a list is left out)."""
        ...

    # the commit log: what each generation changed, for processes that refresh by replaying it
    def log_change(self, db: Tx, generation: int, change: str) -> None:
        """Record, inside the commit's transaction, what `generation` changed (`engram.index.live.refresh`)."""
        ...
    def changes_since(self, generation: int, latest: int) -> list[tuple[int, str]]:
        """The (generation, change) rows logged for generations `generation` + 1 .. `latest`, in order (some may
        be missing: a commit of an engram without the log, or pruned; none where the store has no log)."""
        ...

    # LLM response cache and usage
    def cached_response(self, key: str) -> str | None: ...
    def put_response(self, key: str, model: str, response: str) -> None: ...
    def add_llm_usage(self, model: str, amounts: dict[str, int]) -> None: ...
    def llm_usage(self) -> dict[str, dict[str, int]]: ...
