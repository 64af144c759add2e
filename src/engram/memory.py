"""`Memory`: the facade that wires the store, embedder, LLM, graph and retrievers together."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

from engram.config import MemoryConfig, RetrieveConfig
from engram.embed.base import Embedder, model_key
from engram.errors import LLM_HINT, InputError, LLMError
from engram.extract.claims import ClaimSettings
from engram.extract.importers import ExtractionSet, as_extraction_set
from engram.extract.offline import EXTRACTOR_KEY, OfflineSession, resolve_extractor
from engram.extract.planning import ExtractionEstimate
from engram.extract.session import LLMSession, estimate_without_llm, usage_stats
from engram.graph.neighbourhood import Neighbourhood
from engram.index.live.live_index import LiveIndex
from engram.index.live.load import VectorSource
from engram.index.live.retry import retry_conflicts
from engram.index.live.writer import Writer
from engram.index.view.graph_index import GraphIndex
from engram.index.view.graph_snapshot import graph_snapshot
from engram.ingest.prepare import check_unicode, document_list, id_list
from engram.ingest.sync import SyncReport, plan_sync
from engram.llm.base import ChatModel
from engram.retrieve.context import RetrievalContext, embed_fn
from engram.retrieve.peers import estimate as estimate_peer
from engram.retrieve.peers.base import PeerEstimate, PeerHost, PeerSync
from engram.retrieve.peers.manager import PeerSet
from engram.retrieve.rse import RSEParams
from engram.retrieve.run import answer_all, retrieve, segments, warm_view
from engram.retrieve.segments import Segments
from engram.settings import checked_arguments, load_file_config, resolve_embedder, resolve_llm
from engram.store.base import Store
from engram.store.manifest import open_directory
from engram.store.peer_tables import PeerTables
from engram.store.pg_schema import is_database_url, redact
from engram.store.records import RecordStore
from engram.types import Answer, Document, GraphSnapshot, IndexReport, Progress, Retrieval

DB_NAME = "engram.sqlite"

T = TypeVar("T")


class Memory:
    """A HippoRAG 2 memory stored in one directory, or in a PostgreSQL schema shared by several processes.

    >>> with Memory("notes.engram") as memory:          # doctest: +SKIP
    ...     memory.index(["Alice founded Acme.", "Acme is based in Lyon."])
    ...     memory.retrieve("Where is Alice's company?")

    Parameters
    ----------
    path : str or Path
        A directory (created on first use), or `postgresql://user:password@host/db?schema=notes` (the
        `postgres` extra).
    embedder : Embedder or str, optional
        An embedder or a spec (`minilm`, `st:NAME`, `openai:MODEL`, `hash`). Default: the one the memory was
        written with, else $ENGRAM_EMBEDDER, else all-MiniLM-L6-v2.
    llm : ChatModel or False, optional
        A chat model; None (the default) for the one the environment and config files configure, exactly as
        the CLI resolves it (none configured means no LLM); False for no LLM. Without an LLM passages are
        indexed as pending (found by dense and BM25 search) and the recognition filter is skipped.
    config : MemoryConfig or dict, optional
        Retrieval, graph and chunking settings; default: the memory's `config.json`, else the defaults.
    create : bool
        Create the memory when it does not exist (False: refuse).
    extractor : str, optional
        `"llm"` or `"spacy"` (triples from a dependency parse, the `nlp` extra); default: the one the memory
        was built with, else $ENGRAM_EXTRACTOR, else the LLM.

    Raises
    ------
    InputError
        A bad path, URL or argument (the message names the fix).
    EmbedderMismatchError
        The memory was written with another embedder than `embedder`.
    MemoryFormatError
        The memory's files are damaged or of an unknown format version.
    MissingDependencyError
        An extra that the memory or the arguments need is not installed.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: Embedder | str | None = None,
        llm: ChatModel | Literal[False] | None = None,
        config: MemoryConfig | dict[str, Any] | None = None,
        create: bool = True,
        extractor: str | None = None,
    ) -> None:
        config = checked_arguments(path, llm, config)
        self.url = str(path) if is_database_url(path) else None  # a PostgreSQL memory: no directory
        self.path = Path(path if self.url is None else redact(self.url))  # never a password in a path
        directory = None if self.url else self.path
        self.embedder = resolve_embedder(embedder, directory)
        self.config = config or (load_file_config(self.path) if directory else MemoryConfig())
        self.llm: ChatModel | None = resolve_llm(directory) if llm is None else llm or None
        self._owned_llm = self.llm if llm is None else None  # made here, so closed here
        self._store = self._open_store(create)
        self._live = LiveIndex(
            directory,
            self._store,
            self.embedder,
            model_key(self.embedder),
            self.config.graph,
            warm=warm_view if self.config.retrieve.query_links else None,
        )
        self._session: LLMSession | None = None
        self.extractor = resolve_extractor(extractor, self._store.get_meta(EXTRACTOR_KEY))
        self._extractor_chosen = bool(extractor or os.environ.get("ENGRAM_EXTRACTOR"))  # not just remembered
        self._offline: OfflineSession | None = None
        self._writer = Writer(self._store, self._live, self.config.chunk, self._extraction_session)
        self._peers = PeerSet(None if self.url else PeerTables(self.path / DB_NAME), self._peer_host)

    def _open_store(self, create: bool) -> Store:
        if self.url is not None:
            from engram.store.postgres import PostgresStore

            return PostgresStore(self.url, self.embedder.identity, create)
        open_directory(self.path, self.embedder.identity, create, self.path / DB_NAME)
        return RecordStore(self.path / DB_NAME)

    # lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Write what is pending (the vector snapshot, the LLM usage ledger) and release the store, the peer tables
        and an LLM client made here. Using the memory afterwards is an error; `with Memory(...)` closes it.
        """
        try:
            try:
                self.flush()
            finally:
                self._flush_llm()
        finally:
            self._peers.close()
            self._store.close()
            close_llm = getattr(self._owned_llm, "close", None)
            if callable(close_llm):
                close_llm()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # the live index (engram/index/live/live_index.py) -------------------------------------------------------------
    def context(self, config: RetrieveConfig | None = None) -> RetrievalContext:
        """What retrieval functions (`engram.retrieve`) need, over the latest committed generation: the index
        view, the embedder, the retrieval settings (`config` overrides the memory's) and the LLM, if any."""
        view = self._live.current()
        return RetrievalContext(
            view=view,
            embed=embed_fn(self.embedder),
            dim=self.embedder.dim,
            config=config or self.config.retrieve,
            bm25=partial(self._live.bm25, view),
            chat=self._query_chat(),
            tables=self._peers.tables,
        )

    def _query_chat(self) -> ChatModel | None:
        """Query-time LLM calls (filter, reader, query NER, IRCoT) go through the response cache and the
        usage ledger, like extraction calls, within the query-time budget (`ChatClient.for_queries`)."""
        session = self._llm_session()
        return None if session is None else session.query_chat

    def _source(self) -> VectorSource:
        return self._live.source()

    def _current(self) -> GraphIndex:
        """The index of the latest committed generation (reloaded when another process committed one)."""
        return self._live.current()

    def flush(self) -> None:
        """Write the vector snapshot (index/g<N>/*.npy) so the next open loads vectors memory-mapped instead of
        from the SQLite cache, and drop from that cache the vectors the snapshot now holds (docs/format.md, "Each
        vector stored once"). Called by `close()` when anything changed; safe to skip (the cache keeps them)."""
        self._live.flush()

    # public API ---------------------------------------------------------------------------------------
    def index(
        self,
        documents: Iterable[str | Document] | str | Document,
        *,
        extractions: ExtractionSet | str | Path | Iterable[dict[str, Any]] | None = None,
        progress: Progress | None = None,
        max_tokens: int | None = None,
        max_input_tokens: int | None = None,
    ) -> IndexReport:
        """Add documents, and update those stored under the same id with other content.

        Only what is new is extracted, embedded and linked, and queries on this Memory see it at once. With an
        LLM, stored passages left unfinished (by a crash, a token budget or failed replies) are extracted first.

        Parameters
        ----------
        documents : str, Document, or an iterable of them
            A str gets an id from its content.
        extractions : path, ExtractionSet or iterable of dict, optional
            Precomputed extractions (engram JSONL `{"id", "entities", "triples"}` or HippoRAG OpenIE JSON): the
            passages they cover need no LLM; stored passages still pending take them too.
        progress : callable, optional
            Called with each stage's progress.
        max_tokens : int, optional
            Start no passage once this call has spent this many LLM tokens (`report.budget_reached`; a re-run
            resumes).
        max_input_tokens : int, optional
            Chunk documents so every extraction prompt fits this many tokens.

        Returns
        -------
        IndexReport
            Ids `added`, `updated`, `unchanged` and `skipped`, passages extracted, failed and pending, LLM usage,
            timings and the memory's stats after the commit.

        Raises
        ------
        InputError
            A document or extraction file that cannot be read (the message names it).
        ConflictError
            Other writers committed first on every attempt.
        LLMError
            The LLM is misconfigured (wrong model, key or URL): found on the first passage.
        """
        found, docs = as_extraction_set(extractions), document_list(documents)
        return self._finish(
            self._retried(lambda: self._writer.index(docs, found, progress, max_tokens, max_input_tokens))
        )

    def update(
        self, document: Document, *, extractions: ExtractionSet | str | Path | Iterable[dict[str, Any]] | None = None
    ) -> IndexReport:
        """Replace a document's content, title and metadata in one atomic commit (an unknown id is added).

        Chunks whose text did not change keep their extractions and vectors: no LLM call, no embedding.

        Parameters
        ----------
        document : Document
            The whole new document: a title or metadata left out is cleared.
        extractions : path, ExtractionSet or iterable of dict, optional
            As for `index`.

        Returns
        -------
        IndexReport
            With the id in `updated` (or `added`).

        Raises
        ------
        InputError, ConflictError, LLMError
            As for `index`.
        """
        found = as_extraction_set(extractions)
        return self._finish(self._retried(lambda: self._writer.update(document, found)))

    def delete(self, document_ids: Iterable[str] | str) -> IndexReport:
        """Remove documents, their passages (unless another document shares them), the facts and phrases no
        remaining passage states, and their edges. No rebuild: the graph equals a fresh build without them.

        Parameters
        ----------
        document_ids : str or iterable of str
            The ids to remove.

        Returns
        -------
        IndexReport
            Ids `deleted`; unknown ids in `skipped`.

        Raises
        ------
        ConflictError
            Other writers committed first on every attempt.
        """
        ids = id_list(document_ids)
        return self._finish(self._retried(lambda: self._writer.delete(ids)))

    def _retried(self, write: Callable[[], T]) -> T:
        """`write()`, prepared again (holding the write turn) while another writer commits first."""
        return retry_conflicts(write, turn=self._live.turn)

    def _finish(self, report: IndexReport) -> IndexReport:
        self._record_extractor()
        report.stats = self._live.stats()
        report.pending, report.dropped_triples = report.stats["pending"], self._live.dropped()
        self._peers.after_write(report)  # the peer methods follow the commit (engram.retrieve.peers)
        return report

    def _record_extractor(self) -> None:
        """After a write: remember the extractor in force, so that the next open without one (`engram index`
        with no --extractor) extracts new passages the same way instead of leaving them pending."""
        if self._store.get_meta(EXTRACTOR_KEY) != self.extractor:
            with self._store.transaction() as db:
                self._store.set_meta(db, EXTRACTOR_KEY, self.extractor)

    def extract(
        self,
        progress: Progress | None = None,
        max_tokens: int | None = None,
        redo: str | None = None,
        lease: float | None = None,
    ) -> IndexReport:
        """Run the LLM on pending and failed passages, then add their triples to the graph.

        Any number of processes (on any number of machines, for a PostgreSQL memory) may run it on one memory at
        once: passages are leased to one process at a time, so none is sent to the LLM twice, and a process
        that finds the rest leased to others waits until they finish them or their leases lapse (a killed
        process's), then takes those over (docs/scale.md, "Several extract workers").

        Parameters
        ----------
        progress : callable, optional
            Called with each stage's progress.
        max_tokens : int, optional
            Cap on the LLM tokens spent (`report.budget_reached`; run it again to resume).
        redo : {"other", "all"}, optional
            `"other"` also re-extracts the passages another extractor made (another model or prompt version, the
            offline extractor, an import); `"all"` re-extracts everything, asking the model again rather than
            replaying cached replies. A passage whose re-extraction fails keeps its earlier triples.
        lease : float, optional
            Seconds a claim on a passage lasts without renewal (renewed every third of it while the passage is
            worked on): how long others wait for the passages of a process killed on another machine. Default
            $ENGRAM_EXTRACT_LEASE, else 120.

        Returns
        -------
        IndexReport
            Passages extracted and failed, LLM usage, the stats after the commit.

        Raises
        ------
        LLMError
            No LLM is configured, or it is misconfigured.
        """
        if self.llm is None:
            raise LLMError("no LLM configured: " + LLM_HINT)
        if not self._extractor_chosen:  # extract runs the LLM, whoever built the memory (unless told otherwise)
            self.extractor = "llm"
        claims = ClaimSettings.from_environment(lease, wait=True)
        report = IndexReport()
        self._writer.extract_all(report, progress, max_tokens, redo, claims)  # retries its commits itself
        return self._finish(report)

    # the LLM: cache, accounting, budgets ------------------------------------------------------------------
    def _llm_session(self) -> LLMSession | None:
        if self.llm is None:
            return None
        if self._session is None or self._session.llm is not self.llm:
            self._flush_llm()
            self._session = LLMSession(self._store, self.llm)
        return self._session

    def _extraction_session(self) -> LLMSession | OfflineSession | None:
        """Who extracts new passages: the offline extractor with `extractor="spacy"`, else the LLM (if any)."""
        if self.extractor == "spacy":
            if self._offline is None:
                self._offline = OfflineSession(self._store)
            return self._offline
        return self._llm_session()

    def _flush_llm(self) -> None:
        if self._session is not None:
            self._session.flush()

    def estimate(
        self,
        documents: Iterable[str | Document] = (),
        *,
        extractions: ExtractionSet | str | Path | Iterable[dict[str, Any]] | None = None,
        max_input_tokens: int | None = None,
    ) -> ExtractionEstimate:
        """What `index(documents)` (or, without documents, `extract()`) would send to the LLM, without calling it or
        writing anything.

        Parameters
        ----------
        documents : iterable of str or Document
            Documents that would be indexed (none: the stored passages still to extract).
        extractions : optional
            Precomputed extractions, as for `index`: the passages they cover cost nothing.
        max_input_tokens : int, optional
            As for `index`.

        Returns
        -------
        ExtractionEstimate
            Passages to extract, requests, input tokens, and requests the response cache will answer. Tokens are
            counted by `engram.tokens` (an offline estimate unless ENGRAM_TOKENIZER names a tokenizer).
        """
        index = self._current()
        prepared, _ = self._writer.prepare(documents, max_input_tokens)
        found = as_extraction_set(extractions)
        fresh = [p for p in prepared.passages if found.find(p.id, p.title, p.text, p.doc_id) is None]
        stored = [p for p, alive in zip(index.passages, index.passage_alive) if alive]
        session = self._llm_session()
        if session is None:
            return estimate_without_llm(self._store, [*stored, *fresh])
        return session.estimate([*stored, *fresh])

    # peer methods (engram.retrieve.peers): their own index beside the shared one -----------------------
    def _peer_host(self, tables: PeerTables, progress: Progress | None) -> PeerHost:
        session = self._llm_session()
        chat = None if session is None else session.chat
        return PeerHost(self._current(), embed_fn(self.embedder), self.embedder.dim, chat, tables, progress)

    def add_method(self, name: str, progress: Progress | None = None, rebuild: bool = False) -> PeerSync:
        """Index the passages for a peer method into its own tables, kept in step by every later write.

        Parameters
        ----------
        name : {"raptor", "graphrag-local", "lightrag"}
            The peer method; re-running resumes where a previous run stopped.
        progress : callable, optional
            Called with each stage's progress.
        rebuild : bool
            Start over where the index depends on write order (raptor re-clusters).

        Returns
        -------
        PeerSync
            What was built: passages, LLM calls and tokens, seconds.

        Raises
        ------
        InputError
            An unknown method name, or a PostgreSQL memory (peer methods keep their index in a directory).
        MissingDependencyError
            The `peers` extra is not installed.
        """
        try:
            return self._peers.add(name, progress, rebuild)
        finally:
            self._flush_llm()

    def method_costs(self, name: str) -> dict[str, Any]:
        """What the peer method `name` spent here: LLM calls, tokens and seconds per phase, its disk and size.

        Raises
        ------
        InputError
            An unknown method name, or a PostgreSQL memory.
        """
        return self._peers.costs(name)

    def estimate_method(self, name: str, documents: Iterable[str | Document] = ()) -> PeerEstimate:
        """What indexing `documents` (and the stored passages) for the peer method `name` would send to the LLM,
        without calling it.

        Returns
        -------
        PeerEstimate
            Requests and input tokens per phase (see `engram.retrieve.peers`).
        """
        index, session = self._current(), self._llm_session()
        prepared, _ = self._writer.prepare(documents)
        stored = [p for p, alive in zip(index.passages, index.passage_alive) if alive]
        return estimate_peer(name, [*stored, *prepared.passages], None if session is None else session.chat)

    def stats(self) -> dict[str, Any]:
        """Counts and settings of the memory, as `engram stats` prints them.

        Returns
        -------
        dict
            Passages, phrases, facts, edges by kind, pending and failed passages, documents, the generation,
            the embedder and extractor, and the LLM usage ledger (calls, tokens, cache hits, retries).
        """
        self._flush_llm()
        return {
            **self._live.stats(),
            "documents": self._store.counts()["documents"],
            "generation": self._live.generation,
            "embedder": self.embedder.identity,
            "extractor": self.extractor,
            "llm": usage_stats(self._store),
        }

    def sync(self, folder: str | Path, progress: Progress | None = None) -> SyncReport:
        """Make the memory's documents from `folder` equal the folder's files: add new ones, update changed ones,
        delete those whose file is gone (see `engram.ingest.sync`). Each step commits on its own, so an
        interrupted sync leaves a consistent memory and a re-run finishes it.

        Parameters
        ----------
        folder : str or Path
            The folder, read recursively; its files' ids are `FOLDERNAME/PATH`.
        progress : callable, optional
            Called with each stage's progress.

        Returns
        -------
        SyncReport
            Ids added, updated, deleted, unchanged and skipped (with the reason), and the extraction counts.

        Raises
        ------
        InputError
            The folder does not exist, or another folder of the same name was indexed.
        """
        plan = plan_sync(folder, self.documents(), self._store.document_hashes())
        report = SyncReport(deleted=plan.delete, unchanged=plan.unchanged, skipped=plan.skipped)
        if plan.delete:
            self.delete(plan.delete)
        done = self.index([*plan.add, *plan.update], progress=progress)  # with an LLM, retries failed passages
        report.added, report.updated = done.added, done.updated
        report.extracted, report.failed, report.llm = done.extracted, done.failed, done.llm
        report.skipped.update(done.skipped)
        return report

    def extraction_failures(self) -> dict[str, int]:
        """The reasons the stored passages failed extraction, each with how many passages it failed (most
        first). The next `index`, `sync` or `extract` with an LLM retries them."""
        index = self._current()
        alive = [p.content_hash for p, ok in zip(index.passages, index.passage_alive) if ok]
        rows = self._store.extractions_for(sorted(set(alive)))
        failed = [rows[h] for h in alive if h in rows and rows[h].status == "failed"]
        reasons = Counter(row.error or "no reason recorded" for row in failed)
        return dict(reasons.most_common())

    def documents(self) -> dict[str, dict[str, Any]]:
        """Stored document ids with their metadata."""
        return self._store.document_metadata()

    def phrases_of(self, passage_id: str) -> list[str]:
        """The phrases a passage is linked to in the graph (to explain why it was retrieved)."""
        return self._current().phrases_of(passage_id)

    def graph(self) -> GraphSnapshot:
        """A copy of the whole graph of the latest committed generation, by node names: to inspect, test or
        compare memories (`neighbourhood` pictures a part of it).

        Returns
        -------
        GraphSnapshot
            The alive passages, phrases and facts, and the edges of each kind with their weights. A frozen
            copy: changing it, or the memory afterwards, changes neither.
        """
        return graph_snapshot(self._current(), self.config.graph.context_weight)

    @property
    def index_loads(self) -> int:
        """How many times this memory has built its index state whole (restored from a snapshot, or rebuilt
        from the records) instead of bringing it forward by replaying other processes' commits from the
        commit log (`engram.index.live.refresh`): each is a full read, worth watching where several processes
        share a memory. Reading it loads nothing.

        Returns
        -------
        int
            0 until the first read or write; then 1, plus one for each later reload.
        """
        return self._live.loads

    def neighbourhood(self, around: str | Sequence[str], hops: int = 1, limit: int = 50) -> Neighbourhood:
        """The graph around passage ids or phrases (a name is a passage id when one matches, else a phrase,
        matched after normalisation): the nodes within `hops` edges, at most `limit`, and the edges among them
        with their kinds (relation, synonym, context) and weights. For pictures and explanations."""
        from engram.index.view.neighbourhood import around as picture

        names = [around] if isinstance(around, str) else list(around)
        return picture(self._current(), names, hops, limit, self.config.graph.context_weight)

    def retrieve(
        self,
        queries: str | Sequence[str],
        top_k: int = 5,
        method: str = "hipporag2",
        *,
        query_entities: Mapping[str, Sequence[str]] | None = None,
        config: RetrieveConfig | None = None,
    ) -> list[Retrieval]:
        """Ranked passages for each query, with the why.

        Parameters
        ----------
        queries : str or sequence of str
            One query or several; each is ranked alone.
        top_k : int
            Passages per query.
        method : str
            `hipporag2` (default), `hipporag2-paper`, `dense`, `bm25`, `hybrid`, `hipporag1`, an ablation
            (`hipporag2-ner-to-node`, `-query-to-node`, `-no-passage-nodes`, `-no-filter`) or an added peer
            method; docs/choosing.md says which to use when.
        query_entities : mapping, optional
            Query text -> named entities, for `hipporag1` and `hipporag2-ner-to-node`; queries it lacks get
            their entities from the LLM when one is configured.
        config : RetrieveConfig, optional
            Overrides the memory's retrieval settings for this call.

        Returns
        -------
        list of Retrieval
            One per query, in order: passages with scores, the candidate and kept facts, the seed phrases,
            whether the ranking fell back to passage scores alone and why, and `signals`.

        Raises
        ------
        InputError
            An empty or non-text query, or an unknown method.
        """
        self._llm_session()  # account for the calls below
        try:
            ctx = self.context(config)
            return retrieve(ctx, _as_queries(queries), top_k, method, query_entities=query_entities)
        finally:
            self._flush_llm()

    def segments(
        self,
        queries: str | Sequence[str],
        base: str = "hipporag2",
        budget_tokens: int = 6000,
        params: RSEParams | None = None,
    ) -> list[Segments]:
        """Runs of adjacent passages instead of single passages: relevant segment extraction over the ranking of
        `base`, at most `budget_tokens` tokens per query.

        Returns
        -------
        list of Segments
            One per query (engram.retrieve.segments).

        Raises
        ------
        InputError
            As for `retrieve`.
        """
        self._llm_session()  # account for the calls below
        try:
            return segments(self.context(), _as_queries(queries), base, budget_tokens, params)
        finally:
            self._flush_llm()

    def answer(self, queries: str | Sequence[str], top_k: int = 5, method: str = "hipporag2") -> list[Answer]:
        """Retrieve with `method`, then read the top `top_k` passages with the LLM.

        Returns
        -------
        list of Answer
            One per query: the answer, the passages it read and the facts kept.

        Raises
        ------
        LLMError
            No LLM is configured, or it failed.
        InputError
            As for `retrieve`.
        """
        self._llm_session()  # account for the calls below
        try:
            return answer_all(self.context(), _as_queries(queries), top_k, method)
        finally:
            self._flush_llm()


def _as_queries(queries: str | Sequence[str]) -> list[str]:
    if not isinstance(queries, str) and (isinstance(queries, Mapping) or not isinstance(queries, Iterable)):
        raise InputError(f"queries are a str or a list of str, not a {type(queries).__name__}")
    items = [queries] if isinstance(queries, str) else list(queries)
    for q in items:
        if not isinstance(q, str) or not q.strip():
            raise InputError("queries must be non-empty strings")
        check_unicode(q, f"query {q[:60]!r}")
    return items
