"""Loading the live state from the records, and the vector lookups behind it (snapshot, cache, embedder)."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Generic, TypeVar, overload

import numpy as np

from engram.config import GraphConfig
from engram.embed.base import Embedder, Role
from engram.errors import MemoryFormatError
from engram.index.saved.ann_cache import save_ann
from engram.index.saved.codes_cache import save_codes
from engram.index.saved.state_file import state_files
from engram.index.state.index_state import Changes, IndexState, Vectors, fact_text, passage_text
from engram.index.state.rows import PRECISIONS, RowView
from engram.ingest.prepare import passage_hash
from engram.store.base import Store
from engram.store.packed_rows import is_packed, unpack
from engram.store.rows import PassageRow
from engram.store.snapshot import (
    ROLES,
    BlockTable,
    SnapshotDamaged,
    VectorTable,
    manifest_sums,
    snapshot_dir,
    write_snapshot,
)
from engram.store.snapshot_lookup import SnapshotLookup, mapped_file
from engram.store.snapshot_parts import DIGEST, KEYS_BINARY, hex_keys, listed_key_name, part_names, relocated
from engram.types import Progress

log = logging.getLogger(__name__)
T = TypeVar("T")

EMBED_BATCH = 256  # texts per embed call: each call's vectors are committed to the cache before the next
LOOKUP_CHUNK = 4_096  # texts whose cached vectors are asked for at a time (PostgreSQL: ~6 MB per reply)
ROLE_NAMES: dict[str, Role] = {"query": "query", "passage": "passage", "fact": "fact", "phrase": "phrase"}
NORM_TOLERANCE = 1e-3  # how far a vector's length may be from 1 (embedders return L2-normalised rows, or zero)
REPAIR = "restore the memory from a backup, or index the documents into a new memory"


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RowKeys(Sequence[str], Generic[T]):
    """The text hashes of a table's rows (`text` of each item), computed for the rows read: a snapshot writes
    only the new rows' keys."""

    def __init__(self, items: Sequence[T], text: Callable[[T], str]) -> None:
        self.items, self.text = items, text

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [text_hash(self.text(item)) for item in self.items[index]]
        return text_hash(self.text(self.items[index]))


class VectorSource:
    """Vectors by text: the snapshot first, then the SQLite embedding cache, then (`lookup`) the newest snapshot's
    parts this process does not hold, then the embedder (whose results are committed to the cache at once)."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        model_key: str,
        snapshot: VectorTable,
        lookup: SnapshotLookup | None = None,
    ) -> None:
        self.store, self.embedder, self.model_key, self.lookup = store, embedder, model_key, lookup
        self.snapshot = {role: RowView(parts, embedder.dim) for role, (_, parts) in snapshot.items()}
        self.rows = {role: {h: i for i, h in enumerate(keys)} for role, (keys, _) in snapshot.items()}
        # the snapshot files searched through `rows` already: a lookup in the newest snapshot skips them
        self.held = {
            role: {f for p in parts if (f := mapped_file(p)) is not None} for role, (_, parts) in snapshot.items()
        }
        self.embedded = 0
        self.batch = EMBED_BATCH

    def get(
        self, role: str, texts: Sequence[str], progress: Progress | None = None, out: Vectors | None = None
    ) -> Vectors:
        """The texts' vectors, written into `out` when given (one row per text, each written)."""
        if out is None:
            out = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
        hashes = [text_hash(t) for t in texts]
        where = self.rows.get(role, {})
        wanted: dict[str, list[int]] = {}
        found: list[int] = []
        rows: list[int] = []
        for i, h in enumerate(hashes):
            row = where.get(h)
            if row is None:
                wanted.setdefault(h, []).append(i)
            else:
                found.append(i)
                rows.append(row)
        if found:  # one gather from the memory-mapped snapshot, not a copy per row
            out[np.array(found, dtype=np.int64)] = self.snapshot[role][np.array(rows, dtype=np.int64)]
        keys = list(wanted)
        for start in range(0, len(keys), LOOKUP_CHUNK):  # a chunk's rows in transit at a time, not all of them
            _place(self.store.vectors_for(self.model_key, role, keys[start : start + LOOKUP_CHUNK]), wanted, out)
        if wanted and self.lookup is not None:  # saved by another process since this one opened its snapshot
            for h, vector in self.lookup.find(role, list(wanted), self.held.get(role, ())).items():
                out[wanted.pop(h)] = vector
        if wanted:
            self._embed(role, texts, wanted, out, progress)
        return out

    def _embed(
        self, role: str, texts: Sequence[str], wanted: dict[str, list[int]], out: Vectors, progress: Progress | None
    ) -> None:
        """Embed the `wanted` texts `EMBED_BATCH` at a time, committing each batch to the cache before the next:
        an interrupted run keeps its finished batches, and a re-run embeds only the rest."""
        keys = sorted(wanted)
        total = len(keys)
        for start in range(0, total, self.batch):
            part = keys[start : start + self.batch]
            todo = [texts[wanted[h][0]] for h in part]
            report = (lambda done, at=start: progress(f"embed {role}s", at + done, total)) if progress else None
            fresh = self.embedder.embed(todo, role=ROLE_NAMES[role], progress=report)
            self.store.put_vectors(self.model_key, role, part, fresh)
            self.embedded += len(todo)
            for h, vector in zip(part, fresh):
                out[wanted[h]] = vector


def _place(cached: dict[str, bytes], wanted: dict[str, list[int]], out: Vectors) -> None:
    """Write cached vectors into the rows of `out` that want them, in one step, and take their texts off
    `wanted`. A cached blob of the wrong length (a damaged row) is no vector of this embedder: it stays
    wanted, so the text is embedded again and the cache row rewritten, and a warning says so."""
    at: list[int] = []
    blobs: list[bytes] = []
    size = out.shape[1] * 4  # float32
    wrong = [h for h, blob in cached.items() if len(blob) != size]
    if wrong:
        log.warning(
            "%d cached embeddings have the wrong length (not %d bytes; the embedding cache was damaged): "
            "embedding their texts again",
            len(wrong),
            size,
        )
    for h, blob in cached.items():
        if len(blob) != size:
            continue
        rows = wanted.pop(h)
        at.extend(rows)
        blobs.extend([blob] * len(rows))
    if at:
        out[np.array(at, dtype=np.int64)] = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(at), -1)


def fill_vectors(state: IndexState, source: VectorSource, progress: Progress | None = None) -> None:
    """Vectors for the phrase and fact rows that have none yet."""
    missing = state.missing_vectors()
    for role, text in (("phrase", state.phrases.__getitem__), ("fact", lambda i: fact_text(state.facts[i]))):
        if missing[role]:
            texts = [text(i) for i in missing[role]]
            state.vectors[role].append_filled(len(texts), partial(source.get, role, texts, progress))


def load_state(
    store: Store, source: VectorSource, config: GraphConfig, precision: str = "float32"
) -> tuple[IndexState, set[int]]:
    """The state of the committed records (extractions a commit linked), and the synonym list rows computed on
    the way (`load_synonyms`); `precision`: how the memory stores its vectors (`ROLE_DTYPES`)."""
    state = IndexState(source.embedder.dim, config, precision)
    passages = store.passages()
    check_records(store, passages)
    vectors = source.get("passage", [passage_text(p) for p in passages])
    check_vectors(store, "passage", [vectors])
    for passage, vector in zip(passages, vectors):
        state.add_passage(passage, vector)
    extractions = store.extractions()
    for i, passage in enumerate(passages):
        row = extractions.get(passage.content_hash)
        if row is not None and row.linked:  # an unlinked row (its run stopped before the commit) stays pending:
            # its phrases join by a commit (Writer.commit_stranded), which gives them their synonym lists
            state.set_triples(i, row.status, row.triples if row.status == "done" else [])
    fill_vectors(state, source)
    for role in ("phrase", "fact"):
        check_vectors(store, role, state.vectors[role].blocks())
    return state, load_synonyms(store, state)


def check_records(store: Store, passages: Sequence[PassageRow]) -> None:
    """Refuse records changed outside engram before a graph is built from them (the snapshot is missing or
    damaged, or the store keeps none): a passage whose text or title no longer gives its content hash, a
    chunk, passage or document row whose partner row is gone. Built on, they would change rankings silently."""
    for passage in passages:
        if passage_hash(passage.title, passage.text) != passage.content_hash:
            raise MemoryFormatError(
                f"{store.location} is damaged: the text of passage {passage.id!r} does not match its content hash "
                f"(changed outside engram); {REPAIR}"
            )
    dangling = store.dangling_rows()
    if dangling:
        raise MemoryFormatError(f"{store.location} is damaged: {'; '.join(dangling[:3])}; {REPAIR}")


def check_vectors(store: Store, role: str, blocks: Sequence[Vectors]) -> None:
    """Refuse stored vectors that no embedder returned: not finite, or neither of length 1 nor zero (a changed
    byte of a cached vector; the embedding cache keeps no checksum of its own)."""
    bad = 0
    for block in blocks:
        for start in range(0, len(block), LOOKUP_CHUNK):  # a chunk's squares at a time, not a copy of the table
            rows = block[start : start + LOOKUP_CHUNK]
            part = unpack(rows) if is_packed(rows) else np.asarray(rows, dtype=np.float32)
            with np.errstate(over="ignore", invalid="ignore"):
                squares = np.einsum("ij,ij->i", part, part)
                off = ~np.isfinite(squares) | ((squares > 0) & (np.abs(np.sqrt(squares) - 1.0) > NORM_TOLERANCE))
            bad += int(np.count_nonzero(off))
    if bad:
        raise MemoryFormatError(
            f"{store.location} is damaged: {bad} stored {role} vector(s) are not ones an embedder returns "
            f"(changed outside engram); {REPAIR}"
        )


def load_synonyms(store: Store, state: IndexState) -> set[int]:
    """Give a loaded state its synonym lists from the store; when it has none for a graph that has phrases,
    they are computed (the returned rows must then be persisted)."""
    lists = store.synonym_lists()
    if lists or not len(state.alive_phrases()) or store.get_meta("synonym_lists") == "1":
        where = state.phrase_row
        state.synonyms.load(
            {
                where[k]: [(sim, n, where[n]) for n, sim in items if n in where]
                for k, items in lists.items()
                if k in where
            }
        )
        state.changes = Changes()
        return set()
    return state.update_synonyms()


def synonym_payload(state: IndexState, rows: set[int]) -> dict[str, list[tuple[str, float]]]:
    """The lists of `rows`, by phrase key, as the store keeps them."""
    return {state.phrases[r]: [(key, sim) for sim, key, _ in state.synonyms.list_of(r)] for r in sorted(rows)}


def spill_vectors(root: Path | None, state: IndexState) -> None:
    """Move each role's appended vector rows out of RAM into unnamed files under the memory's `index/` (see
    `Rows.spill`; the rows are in the store already, and stay in RAM when the disk refuses), and drop the pages
    this process read of the phrase vectors: only a change's synonym search reads those, a few rows each time,
    while queries keep reading the fact and passage pages they hold."""
    if root is None:
        return
    for role, rows in state.vectors.items():
        try:
            rows.spill(root / "index")
        except OSError as error:
            log.warning("%s vectors stay in RAM: could not move them to a file under %s (%s)", role, root, error)
    state.vectors["phrase"].release()


def save_snapshot(root: Path, generation: int, state: IndexState) -> dict[str, list[str]]:
    """Write snapshot `generation` of `state`; returns, by role, the key files of the parts it wrote (not linked
    from the snapshot the rows were mapped from): the rows whose vectors the embedding cache may still hold."""
    keys: dict[str, Sequence[str]] = {
        "passage": RowKeys(state.passages, passage_text),
        "phrase": RowKeys(state.phrases, str),
        "fact": RowKeys(state.facts.listed(), fact_text),
    }
    tables: BlockTable = {role: (keys[role], state.vectors[role].blocks()) for role in ROLES}
    saved = {role: state.vectors[role].saved_parts() for role in ROLES}  # parts linked, not written again
    sums = write_snapshot(
        root,
        generation,
        tables,
        state_files(state, generation),
        lambda role, rows: state.vectors[role].release(rows),
        saved,
    )
    written: dict[str, list[str]] = {}
    for role in ROLES:  # the next snapshot links the parts from where they lie now
        moved = relocated(snapshot_dir(root, generation), sums, role, saved[role])
        state.vectors[role].relocate(moved)
        linked = next((i for i, part in enumerate(moved) if part is None), len(moved))
        written[role] = [listed_key_name(sums, role, i) for i in range(linked, len(part_names(sums, role)))]
    save_ann(root, state, sums["state.json"])  # labels are this state's rows: named by its file's checksum
    save_codes(root, state, sums["state.json"])
    state.caches.saved_as = sums["state.json"]
    return written


VECTOR_DTYPE = "vector_dtype"  # meta key: how the memory stores its vectors (ROLE_DTYPES, docs/format.md)


def vector_precision(store: Store, made: str = "int8") -> str:
    """How a memory stores its vectors (`PRECISIONS`): the one its meta names from its
    first commit on, `made` (`graph.vector_precision`) for a memory not committed to yet, float32 for one
    committed to before the meta key existed: rounding its rows now would make its saved synonyms those of
    other vectors."""
    value = store.get_meta(VECTOR_DTYPE)
    if value is None:
        return made if store.generation == 0 else "float32"
    if value not in PRECISIONS:
        raise MemoryFormatError(
            f"{store.location} stores its vectors as {value!r}, which this version of engram cannot read: "
            "upgrade engram"
        )
    return value


ONCE = "vectors_once"  # meta key: "1" once the cache holds no vector of the rows in snapshot parts written before
DROP_ROWS = 50_000  # cached vectors deleted per transaction: other writers get their turn in between


def drop_saved_vectors(store: Store, model_key: str, folder: Path, written: dict[str, list[str]]) -> int:
    """Delete from the embedding cache the vectors the snapshot in `folder` now holds, so that each is stored
    once (docs/format.md): the rows of the parts it wrote (`written`, from `save_snapshot`), or of every part the
    first time (a memory whose cache still holds them all). Returns how many keys were dropped. A snapshot
    replaced meanwhile by a newer one (another process) leaves the cache as it is: it is only space."""
    first = store.get_meta(ONCE) != "1"
    dropped = 0
    try:
        sums = manifest_sums(folder)
        for role in ROLES:
            names = (
                [listed_key_name(sums, role, i) for i in range(len(part_names(sums, role)))] if first else written[role]
            )
            for name in names:
                for keys in key_batches(folder / name, DROP_ROWS):
                    store.drop_vectors(model_key, role, keys)
                    dropped += len(keys)
    except (SnapshotDamaged, OSError, ValueError) as exc:
        log.info("the embedding cache keeps the vectors of %s (%s)", folder, exc)
        return dropped
    if first:
        with store.transaction() as db:
            store.set_meta(db, ONCE, "1")
    return dropped


_HEX_KEY = re.compile(rb'"([0-9a-f]{64})"')
READ_BYTES = 1 << 20


def key_batches(path: Path, size: int) -> Iterator[list[str]]:
    """The text hashes of a snapshot key file (32-byte digests, or a JSON list of SHA-256 hex digests written
    before), `size` at a time, read a megabyte at a time: a large part's keys (gigabytes of JSON at a million
    passages) are never all in RAM."""
    if path.suffix == KEYS_BINARY:
        with path.open("rb") as handle:
            while chunk := handle.read(DIGEST * size):
                yield hex_keys(chunk)
        return
    batch: list[str] = []
    carry = b""
    with path.open("rb") as handle:
        while chunk := handle.read(READ_BYTES):
            data = carry + chunk
            cut = data.rfind(b",") + 1  # every key before the last comma is whole; the rest waits for more
            for match in _HEX_KEY.finditer(data, 0, cut):
                batch.append(match.group(1).decode("ascii"))
                if len(batch) == size:
                    yield batch
                    batch = []
            carry = data[cut:]
    batch.extend(m.group(1).decode("ascii") for m in _HEX_KEY.finditer(carry))
    if batch:
        yield batch


def keep_cached_vectors(store: Store) -> None:
    """A session that keeps its vectors in the cache too (`graph.keep_vector_cache`): the next one that does not
    drops every snapshot row from the cache, not only the rows it wrote."""
    if store.get_meta(ONCE) == "1":
        with store.transaction() as db:
            store.set_meta(db, ONCE, "0")
