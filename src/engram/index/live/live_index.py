"""The live index of an open memory: load on demand, apply changes, commit them, snapshot vectors."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from engram.config import GraphConfig
from engram.embed.base import Embedder
from engram.errors import ConflictError
from engram.index.live.load import (
    VECTOR_DTYPE,
    VectorSource,
    drop_saved_vectors,
    fill_vectors,
    keep_cached_vectors,
    load_state,
    save_snapshot,
    spill_vectors,
    synonym_payload,
    vector_precision,
)
from engram.index.live.refresh import Change, StaleLog, logged_between, replay
from engram.index.saved.ann_cache import load_ann, start_check
from engram.index.saved.codes_cache import check_codes, load_codes, save_codes
from engram.index.saved.state_file import restore_state
from engram.index.state.coded_rows import available, use_codes
from engram.index.state.index_state import IndexState
from engram.index.view.bm25 import BM25Index
from engram.index.view.graph_index import GraphIndex, passage_text, view
from engram.store.base import Store, Tx
from engram.store.snapshot import PendingCheck, load_snapshot, snapshot_dir
from engram.store.snapshot_lookup import SnapshotLookup
from engram.types import Progress

log = logging.getLogger(__name__)
READERS_ABOUT = 30.0  # seconds after another thread's read during which commits derive the next view themselves
CONFLICT = "the memory was changed by another writer meanwhile: run the command again"


class _Clock:
    """Adds the seconds since the previous lap to `timings[name]` (when timings are wanted)."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        if self.timings is not None:
            self.timings[name] = self.timings.get(name, 0.0) + now - self.last
        self.last = now


class LiveIndex:
    """Owns the in-memory `IndexState` of one memory and the `GraphIndex` view retrieval reads. Thread-safe.
    `root`: the memory directory, where vector snapshots and the ANN index are cached; None for a store
    without local files (PostgreSQL: vectors load from its embeddings table).

    Two locks: `lock` serialises whatever touches the state (loads, changes, snapshots); `_view_lock` only
    guards the (view, generation) pair. A reader whose view is current takes only the second, so reads go on
    while a writer embeds, links and commits; views are frozen, so an old one stays valid."""

    def __init__(
        self,
        root: Path | None,
        store: Store,
        embedder: Embedder,
        model_key: str,
        config: GraphConfig,
        warm: Callable[[GraphIndex], object] | None = None,
    ) -> None:
        self.root, self.store, self.embedder, self.model_key, self.config = root, store, embedder, model_key, config
        self.warm = warm  # builds the readers' per-view caches when a writer derives the next view
        self.lock = threading.RLock()
        # the write turn (`turn`): a writer that lost a race holds it across its next attempt; every commit
        # takes it first (before `lock`), so while it is held no other thread of this process commits
        self._turn = threading.RLock()
        self._view_lock = threading.Lock()
        self._last_reads: dict[int, float] = {}  # thread -> when it last asked for the view (monotonic seconds)
        self._committing: int | None = None  # the generation a local commit is writing (its view not yet in)
        self.state: IndexState | None = None
        self.index: GraphIndex | None = None
        self.generation = -1
        self.loads = 0  # states built whole (restored or rebuilt), not brought forward by replaying the log
        self.dirty = False
        self._vectors: VectorSource | None = None
        self._snapshot_damaged = False  # the newest snapshot failed its checksums: rewrite it at the next flush
        # the BM25 index of one view (`bm25`), built under its own lock: never the writer's, so a reader
        # that needs it is not held up by a write, and never of another view than the reader's
        self._bm25_lock = threading.Lock()
        self._bm25: tuple[weakref.ref[GraphIndex], BM25Index] | None = None  # no hold on an old view
        self.precision = vector_precision(store, config.vector_precision)  # of the stored vectors, for good

    def source(self) -> VectorSource:
        if self._vectors is None:
            tables, self._snapshot_damaged = load_snapshot(self.root) if self.root else ({}, False)
            self._vectors = VectorSource(self.store, self.embedder, self.model_key, tables, self._lookup())
        return self._vectors

    def _lookup(self) -> SnapshotLookup | None:
        """Lookups of vectors that only a newer snapshot holds, skipping the parts this process maps."""
        return None if self.root is None else SnapshotLookup(self.root, self.embedder.dim, self._mapped_parts)

    def _mapped_parts(self, role: str) -> set[tuple[int, int]]:
        state = self.state
        if state is None:
            return set()
        return {part.vectors.identity[:2] for part in state.vectors[role].saved_parts() if part is not None}

    def load(self) -> IndexState:
        """The state of the latest committed generation (when another process committed one: its commit log
        replayed, else reloaded)."""
        with self.lock:
            generation = self.store.generation
            if self.state is not None and generation != self.generation and self._replayed(generation):
                return self.state
            if self.state is None or generation != self.generation:
                opening = self.state is None
                self.state, changed, token = self._load_state(generation)
                spill_vectors(self.root, self.state)  # rows a rebuild from the records appended
                restored = token is not None
                self.state.caches.saved_as = token
                if self.root is not None:
                    # at open, the codes are hashed while the caller goes on; a reload (another process
                    # committed), which may see no query before the next one, leaves that to its first search
                    coded = opening and available() and use_codes(self.config, len(self.state.facts))
                    check = check_codes(self.root, self.state) if coded else None
                    self.state.caches.fact_codes.loader = partial(load_codes, self.root, self.state, check)
                if self.state.synonyms.ann_min_rows is not None and self.root is not None:
                    self._lazy_ann(self.root, self.state)
                if changed:  # synonym lists computed on load: keep them
                    with self.store.transaction() as db:
                        self.store.write_synonyms(db, synonym_payload(self.state, changed))
                        self.store.set_meta(db, "synonym_lists", "1")
                with self._view_lock:
                    self.index, self.generation = None, generation
                # a snapshot without the saved state (an older format, damaged) is written again on close
                self.dirty = self.root is not None and (not restored or self._snapshot_damaged)
            return self.state

    def _replayed(self, generation: int) -> bool:
        """Bring the state to `generation` by replaying the store's commit log (engram.index.live.refresh), as if this
        process had made those commits (a directory then writes its snapshot at close); False when the log lacks
        these generations (the caller restores the snapshot, or reloads the records), or does not describe the
        records (then the state is dropped, and the caller reloads it)."""
        if self.state is None or generation < self.generation:
            return False
        entries = logged_between(self.store.changes_since(self.generation, generation), self.generation, generation)
        if entries is None:
            return False
        try:
            replay(self.state, self.store, self.source(), entries)
        except StaleLog as exc:
            log.warning("%s: reloading the memory (%s)", self.store.location, exc)
            self.state = None
            return False
        except BaseException:
            self.state = None  # half replayed: never read
            raise
        spill_vectors(self.root, self.state)
        with self._view_lock:
            self.index, self.generation = None, generation
        self.dirty = self.root is not None
        return True

    @staticmethod
    def _lazy_ann(root: Path, state: IndexState, check: PendingCheck | None = None) -> None:
        """Load the saved phrase ANN index when a synonym search first wants it (opening does not read it)."""
        state.synonyms.ann_loader = lambda: load_ann(root, state, state.caches.saved_as, check)

    def _checking_ann(self, state: IndexState) -> PendingCheck | None:
        """For a change: start checking the saved ANN index's files on a thread while the change builds its tables
        (its synonym search may then load the index without reading gigabytes first), if it is not loaded yet."""
        if self.root is None or state.synonyms.ann_loader is None or state.synonyms.ann is not None:
            return None
        check = start_check(self.root)
        if check is not None:
            self._lazy_ann(self.root, state, check)
        return check

    def _load_state(self, generation: int) -> tuple[IndexState, set[int], str | None]:
        """(state, synonym rows computed on the way, the saved state's checksum when it was restored from one)."""
        self.loads += 1
        if self.root is not None and (snapshot_dir(self.root, generation) / "state.json").exists():
            saved = restore_state(
                self.root, generation, self.store.passages, self.embedder.dim, self.config, self.precision
            )
            if saved is not None:
                if self._vectors is None:  # the snapshot's vectors are the state's: lookups go to the cache
                    self._vectors = VectorSource(self.store, self.embedder, self.model_key, {}, self._lookup())
                return saved[0], set(), saved[1]
        if self._vectors is not None and not self._vectors.snapshot:
            self._vectors = None  # made for a restored state: a rebuild looks vectors up in the latest snapshot
        state, changed = load_state(self.store, self.source(), self.config, self.precision)
        return state, changed, None

    def current(self) -> GraphIndex:
        """The index of the latest committed generation. A commit made while readers are about derives the
        next view before it commits (readers keep the previous one meanwhile); otherwise it is derived lazily,
        so a run of commits with no query in between (a folder sync, bulk inserts) pays for it once."""
        generation = self.store.generation
        with self._view_lock:
            self._last_reads[threading.get_ident()] = time.monotonic()
            # a local commit that is landing: its writer has not returned, so the previous view still holds
            if self.index is not None and generation in (self.generation, self._committing):
                return self.index
        with self.lock:
            state = self.load()
            if self.index is None:
                derived = self._derive(state)
                with self._view_lock:
                    self.index = derived
            return self.index

    def _others_reading(self) -> bool:
        """Whether a thread other than this (writing) one read the view lately. A program that writes and reads
        on one thread gains nothing from deriving the view at commit time, so it stays lazy there."""
        now, me = time.monotonic(), threading.get_ident()
        with self._view_lock:
            for thread, seen in list(self._last_reads.items()):
                if now - seen >= READERS_ABOUT:
                    del self._last_reads[thread]
            return any(thread != me for thread in self._last_reads)

    def _derive(self, state: IndexState) -> GraphIndex:
        derived = view(state)
        if self.warm is not None:
            self.warm(derived)
        return derived

    def stats(self) -> dict[str, int]:
        """`GraphIndex.stats()` of the current generation, counted on the state (no view needed)."""
        with self.lock:
            return self.load().stats()

    def dropped(self) -> int:
        with self.lock:
            return self.load().dropped()

    def bm25(self, view: GraphIndex) -> BM25Index:
        """The BM25 index of `view`'s passages (built once per view; the last view's tokens are reused)."""
        with self._bm25_lock:
            if self._bm25 is not None and self._bm25[0]() is view:
                return self._bm25[1]
            texts = [passage_text(p) for p in view.passages]
            previous = self._bm25[1] if self._bm25 is not None else None
            built = BM25Index(texts, view.passage_alive, [p.id for p in view.passages], previous)
            self._bm25 = (weakref.ref(view), built)
            return built

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the write turn, in this process and across the processes sharing the store (`Store.turn`):
        no other writer commits until it ends, so a change prepared inside it cannot lose the race."""
        with self._turn, self.store.turn():
            yield

    def change(
        self,
        mutate: Callable[[IndexState], None],
        writes: Callable[[Tx], None],
        progress: Progress | None = None,
        timings: dict[str, float] | None = None,
        expected: int | None = None,
        logged: Change | None = None,
    ) -> None:
        """Apply `mutate` to the live state, fill vectors and synonym lists, then commit `writes`, the changed
        synonym lists and the next generation number in one transaction. On any failure the in-memory state
        is dropped and reloaded from the (unchanged) records on next use. `expected`: the generation the
        caller prepared its change against; a newer one means another writer came first. `logged`: what
        `mutate` does, for the store's commit log (other processes replay it; without it they reload)."""
        clock = _Clock(timings)
        with self._turn, self.lock:
            state, base = self.load(), self.generation
            if expected is not None and base != expected:
                raise ConflictError(CONFLICT)
            check = self._checking_ann(state)
            try:
                mutate(state)
                clock.lap("tables")
                fill_vectors(state, self.source(), progress)
                clock.lap("embed")
                changed = state.update_synonyms()
                clock.lap("synonyms")
                spill_vectors(self.root, state)  # the new rows are read from files from here on
                clock.lap("spill")
                eager = self._others_reading()  # then derive the next view here, not in their way
                following = self._derive(state) if eager else None  # before the commit: readers keep the old one
                clock.lap("view")
                with self._view_lock:
                    self._committing = base + 1
                with self.store.transaction() as db:
                    if self.store.locked_generation(db) != base:
                        raise ConflictError(CONFLICT)
                    writes(db)
                    self.store.write_synonyms(db, synonym_payload(state, changed))
                    entry = None if logged is None else logged.logged([state.phrases[r] for r in changed])
                    if entry is not None:  # else no row: the other processes reload
                        self.store.log_change(db, base + 1, entry)
                    self.store.set_meta(db, "generation", str(base + 1))
                    self.store.set_meta(db, "synonym_lists", "1")
                    self.store.set_meta(db, VECTOR_DTYPE, self.precision)
                clock.lap("commit")
            except BaseException:
                with self._view_lock:
                    self.state = self.index = None
                    self._committing = None
                raise
            finally:
                if check is not None:
                    check.cancel()  # unused (no search wanted the index): the next change checks again
                    if state.synonyms.ann_loader is not None and self.root is not None:
                        self._lazy_ann(self.root, state)
            with self._view_lock:
                self.index, self.generation = following, base + 1
                self._committing = None
            self.dirty = self.root is not None

    def flush(self) -> None:
        with self.lock:
            if self.state is not None and self.dirty and self.root is not None:
                written = save_snapshot(self.root, self.generation, self.state)
                self.dirty = self._snapshot_damaged = False
                if self.config.keep_vector_cache:
                    keep_cached_vectors(self.store)
                else:  # the snapshot holds them now: each vector is stored once
                    folder = snapshot_dir(self.root, self.generation)
                    drop_saved_vectors(self.store, self.model_key, folder, written)
            elif self.state is not None and self.root is not None and self.state.caches.saved_as is not None:
                save_codes(
                    self.root, self.state, self.state.caches.saved_as, encode=False
                )  # codes this process encoded
