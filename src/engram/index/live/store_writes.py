"""Indexing steps between the facade and the store: imported extractions and staged record writes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engram.extract.importers import ExtractionSet
from engram.graph.build import normalize_triple
from engram.ingest.prepare import Prepared
from engram.store.base import Store, Tx
from engram.store.rows import PassageRow


def apply_extractions(store: Store, passages: Sequence[PassageRow], found: ExtractionSet) -> int:
    """Store the given extractions of `passages` (committed at once, in one transaction); returns how many
    passages got one. Given extractions replace earlier ones of the same content."""
    if not len(found):
        return 0
    rows = []
    for p in passages:
        record = found.find(p.id, p.title, p.text, p.doc_id)
        if record is not None:
            triples = [t for t in record["triples"] if isinstance(t, (list, tuple))]
            dropped = len(record["triples"]) - sum(1 for t in triples if normalize_triple(t) is not None)
            rows.append((p.content_hash, record["entities"], triples, dropped))
    store.put_extractions(rows, found.source)
    return len(rows)


def staged_writes(store: Store, prepared: Prepared) -> Callable[[Tx], None]:
    """The record writes of an index() call, run inside the transaction that commits the new generation."""

    def write(db: Tx) -> None:
        for doc, digest in prepared.documents:
            store.add_document(db, doc.id, doc.title, dict(doc.metadata), digest)
        for row in prepared.passages:
            store.add_passage(db, row)
        for doc_id, idx, passage_id in prepared.chunks:
            store.add_chunk(db, doc_id, idx, passage_id)

    return write
