"""The write path of a memory: one commit per `index`, `update`, `delete` or `extract` call. Records go to the
store, extractions come from imports or the LLM session, and the live index applies the change."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import replace
from typing import Protocol

from engram.embed.base import token_limit
from engram.errors import InputError
from engram.extract.claims import ClaimSettings
from engram.extract.importers import ExtractionSet
from engram.extract.planning import passage_token_budget
from engram.extract.runner import ExtractionRun
from engram.extract.session import LLMSession
from engram.index.live.live_index import LiveIndex
from engram.index.live.refresh import Change
from engram.index.live.retry import retry_conflicts
from engram.index.live.store_writes import apply_extractions, staged_writes
from engram.index.state.index_state import IndexState
from engram.index.view.graph_index import GraphIndex, passage_text
from engram.ingest.prepare import EmbedFit, Prepared, as_document, document_hash, document_list, prepare
from engram.ingest.sources import check_origins
from engram.store.base import Store, Tx
from engram.store.rows import PassageRow
from engram.text import ChunkConfig, clean_text
from engram.types import Document, IndexReport, Progress

REDO = (None, "other", "all")  # what `extract_into` re-extracts besides unfinished passages


class Extracting(Protocol):
    """What the writer needs of an extraction session: `engram.extract.session.LLMSession` (the LLM) or
    `engram.extract.offline.OfflineSession` (spaCy)."""

    def extract(
        self, passages: Sequence[PassageRow], progress: Progress | None = None, max_tokens: int | None = None
    ) -> ExtractionRun: ...


class Writer:
    """`session()` returns the extraction session of the moment (None: passages stay pending)."""

    def __init__(
        self,
        store: Store,
        live: LiveIndex,
        chunk: ChunkConfig,
        session: Callable[[], Extracting | None],
    ) -> None:
        self.store, self.live, self.chunk, self.session = store, live, chunk, session

    def index(
        self,
        documents: Iterable[str | Document],
        found: ExtractionSet,
        progress: Progress | None,
        max_tokens: int | None,
        max_input_tokens: int | None,
    ) -> IndexReport:
        report = IndexReport()
        if len(found):
            self.import_into_pending(found, report, progress)
        if self.session() is not None:
            self.extract_into(report, progress, max_tokens)
        self.live.load()
        expected = self.live.generation
        start = time.perf_counter()
        prepared, changed = self.prepare(documents, max_input_tokens)
        report.skipped, report.unchanged = dict(prepared.skipped), prepared.unchanged
        report.timings["prepare"] = time.perf_counter() - start
        for doc_id in changed & set(report.skipped):
            report.skipped[doc_id] = "empty: the stored version is kept (delete the document to remove it)"
        if prepared.documents:
            ids = [doc.id for doc, _ in prepared.documents]
            report.added = [i for i in ids if i not in changed]
            report.updated = [i for i in ids if i in changed]
            self.ingest(prepared, report.updated, found, report, progress, max_tokens, expected)
            report.documents, report.passages = len(prepared.documents), len(prepared.passages)
        return report

    def prepare(
        self, documents: Iterable[str | Document], max_input_tokens: int | None = None
    ) -> tuple[Prepared, set[str]]:
        """Documents ready to ingest, and the ids of the stored documents whose content they replace (their
        passages are freed by the same commit, so a re-indexed document may keep its passage ids)."""
        docs = [as_document(d) for d in document_list(documents)]  # one str or Document: one document
        known = self.store.document_lookup()
        changed = {d.id for d in docs if d.id in known and known[d.id] != document_hash(d)}
        check_origins([d for d in docs if d.id in changed], self.store.document_metadata_lookup())
        kept = {d.id for d in docs if d.id in changed and clean_text(d.text)}
        passages = _Without(self.store.passage_lookup(), set(self.orphans(sorted(kept))))
        chunking = self.chunking(max_input_tokens)
        return prepare(docs, known, passages, chunking, replace=changed, fit=self.embed_fit()), changed

    def update(self, document: Document, found: ExtractionSet) -> IndexReport:
        if not isinstance(document, Document):
            kind = type(document).__name__
            raise InputError(f"update takes one engram.Document (its id names what it replaces), not a {kind}")
        document = as_document(document)  # its id, text, title and metadata checked
        self.live.load()
        expected = self.live.generation
        stored = self.store.document_lookup().get(document.id)
        report = IndexReport()
        if stored == document_hash(document):
            report.unchanged = 1
            return report
        old = stored is not None
        orphans = self.orphans([document.id] if old else [])
        passages = _Without(self.store.passage_lookup(), set(orphans))
        prepared = prepare([document], {}, passages, self.chunk, fit=self.embed_fit())
        if prepared.skipped:
            raise InputError(f"document {document.id!r} is empty: delete the document to remove it")
        removed = [document.id] if old else []
        self.ingest(prepared, removed, found, report, None, None, expected)
        report.documents, report.passages = len(prepared.documents), len(prepared.passages)
        (report.updated if old else report.added).append(document.id)
        return report

    def delete(self, document_ids: Iterable[str]) -> IndexReport:
        self.live.load()
        expected = self.live.generation
        ids = list(dict.fromkeys(document_ids))
        known = self.store.document_lookup()
        report = IndexReport(skipped={d: "not in the memory" for d in ids if d not in known})
        present = [d for d in ids if d in known]
        if present:
            self.ingest(Prepared(), present, ExtractionSet(), report, None, None, expected)
            report.documents, report.deleted = len(present), present
        return report

    def ingest(
        self,
        prepared: Prepared,
        removed_docs: list[str],
        found: ExtractionSet,
        report: IndexReport,
        progress: Progress | None,
        max_tokens: int | None = None,
        expected: int | None = None,
    ) -> None:
        """One commit: drop `removed_docs`, add `prepared`, with extractions imported or from the LLM.
        `expected` is the generation the caller read its records at: if another writer committed since, the
        commit is refused rather than built on stale input."""
        start = time.perf_counter()
        report.imported = apply_extractions(self.store, prepared.passages, found)
        report.timings["import"] = time.perf_counter() - start
        start = time.perf_counter()
        self.run_llm(prepared.passages, progress, report, max_tokens)
        report.timings["extract"] = report.timings.get("extract", 0.0) + time.perf_counter() - start
        orphans = self.orphans(removed_docs)
        start = time.perf_counter()
        vectors = self.live.source().get("passage", [passage_text(p) for p in prepared.passages], progress)
        report.timings["embed"] = report.timings.get("embed", 0.0) + time.perf_counter() - start
        rows = self.store.extractions_for([p.content_hash for p in prepared.passages])

        def mutate(state: IndexState) -> None:
            for pid in orphans:
                state.remove_passage(pid)
            for passage, vector in zip(prepared.passages, vectors):
                state.add_passage(passage, vector)
            for digest, row in rows.items():  # every passage with that content, old ones too
                for i in state.alive_with_content(digest):
                    state.set_triples(i, row.status, row.triples if row.status == "done" else [])

        add = staged_writes(self.store, prepared)

        def writes(db: Tx) -> None:
            self.store.delete_documents(db, removed_docs, orphans)
            add(db)
            self.store.link_extractions(db, rows)

        logged = Change([*orphans], [p.id for p in prepared.passages], sorted(rows))
        self.live.change(mutate, writes, progress, report.timings, expected, logged)

    def orphans(self, removed_docs: list[str]) -> list[str]:
        """The passages of `removed_docs` (each document owns its passages)."""
        used = self.store.chunk_passages(removed_docs)
        return sorted({p for ps in used.values() for p in ps})

    def extract_into(
        self, report: IndexReport, progress: Progress | None, max_tokens: int | None, redo: str | None = None
    ) -> None:
        """Run the LLM on the alive passages without a finished extraction, then commit their triples.
        `redo="other"` also re-extracts finished passages whose extraction another extractor made (another
        model or prompt version, the offline extractor, an import); `redo="all"` re-extracts every passage
        and asks the model again instead of replaying cached replies."""
        if redo not in REDO:
            raise InputError(f"unknown redo {redo!r}: use one of {', '.join(r for r in REDO if r)}")
        session: LLMSession | None = None
        if redo:
            chosen = self.session()
            if not isinstance(chosen, LLMSession):
                raise InputError("redo re-extracts with the LLM: configure one (and not extractor='spacy')")
            session = chosen
        index = self.live.current()
        expected = self.live.generation
        todo = self.to_extract(index, redo, None if session is None else session.identity)
        if redo is None:
            expected = self.commit_stranded(index, todo, progress, report, expected)
        if not todo:
            return
        start = time.perf_counter()
        before = report.extracted + report.failed
        try:
            if session is not None:
                left = None if max_tokens is None else max(0, max_tokens - report.llm.get("tokens", 0))
                self.count(report, session.redo(todo, progress, left, fresh=redo == "all"))
            else:
                self.run_llm(todo, progress, report, max_tokens)
        except BaseException:  # Ctrl-C, an unreachable LLM: what was stored joins the graph before the error goes on
            with contextlib.suppress(Exception):  # a failed commit must not hide why the run stopped: the next
                self.commit_extractions(todo, progress, report, expected)  # extract links them (commit_stranded)
            raise
        report.timings["extract"] = report.timings.get("extract", 0.0) + time.perf_counter() - start
        if report.extracted + report.failed > before:
            self.commit_extractions(todo, progress, report, expected)

    def extract_all(
        self,
        report: IndexReport,
        progress: Progress | None,
        max_tokens: int | None,
        redo: str | None,
        claims: ClaimSettings,
    ) -> None:
        """`Memory.extract`: `extract_into` for any number of workers on one memory at once. The LLM work runs
        outside any write turn, claiming passages as `claims` says (with `claims.wait`, it waits for the other
        workers' leases to end); each commit is retried on its own when another writer committed first, so a
        worker never holds the write turn while the others need it to store their results. The last commit
        takes in what other workers stored too (a killed one's results among them), so once every worker has
        returned nothing that was extracted is left pending."""
        if redo not in REDO:
            raise InputError(f"unknown redo {redo!r}: use one of {', '.join(r for r in REDO if r)}")
        session = self.session()
        if redo and not isinstance(session, LLMSession):
            raise InputError("redo re-extracts with the LLM: configure one (and not extractor='spacy')")
        identity = session.identity if redo and isinstance(session, LLMSession) else None

        def unfinished() -> list[PassageRow]:
            index = self.live.current()
            todo = self.to_extract(index, redo, identity)
            if redo is None:
                self.commit_stranded(index, todo, progress, report, self.live.generation)
            return todo

        todo = retry_conflicts(unfinished, turn=self.live.turn)
        if not todo:
            return
        start = time.perf_counter()
        before, others = report.extracted + report.failed, 0
        try:
            if isinstance(session, LLMSession):
                left = None if max_tokens is None else max(0, max_tokens - report.llm.get("tokens", 0))
                if redo:
                    run = session.redo(todo, progress, left, fresh=redo == "all", claims=claims)
                else:
                    run = session.extract(todo, progress, left, claims=claims)
                self.count(report, run)
                others = run.by_others
            else:
                self.run_llm(todo, progress, report, max_tokens)
        except BaseException:  # as in extract_into: what was stored joins the graph before the error goes on
            with contextlib.suppress(Exception):
                self.commit_extractions(todo, progress, report, None)
            raise
        report.timings["extract"] = report.timings.get("extract", 0.0) + time.perf_counter() - start
        if report.extracted + report.failed > before or others:
            retry_conflicts(lambda: self.commit_extractions(todo, progress, report, None), turn=self.live.turn)

    def commit_stranded(
        self, index: GraphIndex, todo: list[PassageRow], progress: Progress | None, report: IndexReport, expected: int
    ) -> int:
        """Commit the extractions stored for passages the graph still counts unfinished (more of those than the
        store's `todo`: a run stopped between storing them and its commit; a load keeps such unlinked rows out of
        the graph, so this commit gives their phrases synonym lists as any other does); returns the generation
        to expect next."""
        counts = self.live.stats()
        if counts["pending"] + counts["failed"] <= len(todo):
            return expected
        undone = {p.id for p in todo}
        stored = [p for p, ok in zip(index.passages, index.passage_alive) if ok and p.id not in undone]
        self.commit_extractions(stored, progress, report, expected)
        return self.live.generation

    def import_into_pending(self, found: ExtractionSet, report: IndexReport, progress: Progress | None) -> None:
        """Stored passages still without a finished extraction (indexed without an LLM, or failed) take the ones
        `found` gives them: an index call with extractions for documents already stored completes them."""
        counts = self.live.stats()  # running totals: a memory with nothing unfinished reads no passage
        if not counts["pending"] and not counts["failed"]:
            return
        expected = self.live.generation
        unfinished = self.to_extract(self.live.current(), None, None)
        given = [p for p in unfinished if found.find(p.id, p.title, p.text, p.doc_id)]
        if given:
            report.imported += apply_extractions(self.store, given, found)
            self.commit_extractions(given, progress, report, expected)

    def commit_extractions(
        self, passages: list[PassageRow], progress: Progress | None, report: IndexReport, expected: int | None
    ) -> None:
        """Commit the stored extractions of `passages` to every alive passage of the same content (`expected`:
        the generation to build on, None for the latest: the rows are read by content, whatever came since)."""
        rows = self.store.extractions_for([p.content_hash for p in passages])

        def mutate(state: IndexState) -> None:
            for digest, row in rows.items():
                for i in state.alive_with_content(digest):
                    state.set_triples(i, row.status, row.triples if row.status == "done" else [])

        def writes(db: Tx) -> None:
            self.store.link_extractions(db, rows)

        self.live.change(mutate, writes, progress, report.timings, expected, Change(contents=sorted(rows)))

    def to_extract(self, index: GraphIndex, redo: str | None, identity: str | None) -> list[PassageRow]:
        """The alive passages without a finished extraction; with `redo="other"` also those whose extraction
        was not made by `identity`, with `redo="all"` every alive passage."""
        alive = [p for p, ok in zip(index.passages, index.passage_alive) if ok]
        if redo == "all":
            return alive
        done = self.store.extractions_for([p.content_hash for p in alive])

        def needed(p: PassageRow) -> bool:
            row = done.get(p.content_hash)
            return row is None or row.status != "done" or (redo == "other" and row.source != identity)

        return [p for p in alive if needed(p)]

    def run_llm(
        self, passages: Sequence[PassageRow], progress: Progress | None, report: IndexReport, max_tokens: int | None
    ) -> None:
        """Extract `passages` into the records; counts and usage go into `report`, `max_tokens` is the
        budget of the whole call (what earlier steps of it spent is deducted)."""
        session = self.session()
        if session is None or not passages:
            return
        left = None if max_tokens is None else max(0, max_tokens - report.llm.get("tokens", 0))
        self.count(report, session.extract(passages, progress, left))

    @staticmethod
    def count(report: IndexReport, run: ExtractionRun) -> None:
        """Add an extraction run's counts and LLM usage to `report`."""
        report.extracted += run.done
        report.failed += run.failed
        report.budget_reached = report.budget_reached or run.budget_reached
        for key, value in [*run.usage.as_dict().items(), ("tokens", run.usage.tokens)]:
            report.llm[key] = report.llm.get(key, 0) + value

    def chunking(self, max_input_tokens: int | None) -> ChunkConfig:
        if max_input_tokens is None:
            return self.chunk
        budget = passage_token_budget(max_input_tokens)
        current = self.chunk.max_tokens
        return replace(self.chunk, max_tokens=budget if current is None else min(current, budget))


    def embed_fit(self) -> EmbedFit | None:
        """Whether a chunk, embedded as its passage text (title line, then text), fits the embedder's input;
        None for embedders without a limit."""
        limit = token_limit(self.live.embedder)
        if limit is None:
            return None
        max_tokens, count = limit

        def fit(title: str | None, text: str) -> bool:
            return count([passage_text(PassageRow("", "", title, text, "", {}))])[0] <= max_tokens

        return fit


class _Without:
    """Membership in `base` minus `gone` (ids about to be freed by the same commit)."""

    def __init__(self, base: Container[str], gone: set[str]) -> None:
        self.base, self.gone = base, gone

    def __contains__(self, key: object) -> bool:
        return key not in self.gone and key in self.base
