"""From caller input to passage rows: validation, chunking, content hashes and passage ids."""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field

from engram.errors import InputError
from engram.store.records import PassageRow
from engram.text import ChunkConfig, chunk_text, clean_text, content_hash
from engram.types import Document

EmbedFit = Callable[[str | None, str], bool]  # (title, chunk) -> does the embedded passage fit the embedder?


@dataclass
class Prepared:
    """Documents ready to store: their passages (new content only) and the chunk -> passage links."""

    documents: list[tuple[Document, str]] = field(default_factory=list)  # (document, content hash)
    passages: list[PassageRow] = field(default_factory=list)
    chunks: list[tuple[str, int, str]] = field(default_factory=list)  # (doc id, chunk index, passage id)
    skipped: dict[str, str] = field(default_factory=dict)  # doc id -> reason
    unchanged: int = 0


def document_list(documents: Iterable[str | Document] | str | Document) -> list[str | Document]:
    """`documents` as a list: one str or Document by itself is one document (never split into characters)."""
    if isinstance(documents, (str, Document)):
        return [documents]
    if isinstance(documents, (bytes, bytearray)):
        raise InputError("cannot index bytes: decode them to text (str) first")
    if isinstance(documents, Mapping):  # iterating one would index its keys
        raise InputError("a dict is not a list of documents: pass [Document(id, text) for id, text in d.items()]")
    if not isinstance(documents, Iterable):
        raise InputError(f"cannot index a {type(documents).__name__}: pass str or engram.Document, or a list of them")
    return list(documents)


def id_list(document_ids: Iterable[str] | str) -> list[str]:
    """`document_ids` as a list: one str by itself is one id (never split into characters)."""
    if isinstance(document_ids, str):
        return [document_ids]
    if isinstance(document_ids, Mapping) or not isinstance(document_ids, Iterable):
        raise InputError(f"document ids are a str or a list of str, not a {type(document_ids).__name__}")
    ids = list(document_ids)
    wrong = [i for i in ids if not isinstance(i, str)]
    if wrong:
        raise InputError(f"document ids are strings, not {type(wrong[0]).__name__} ({wrong[0]!r})")
    return ids


def as_document(item: object) -> Document:
    if isinstance(item, Document):
        doc = item
    elif isinstance(item, str):
        doc = Document(id="doc-" + content_hash(item)[:16], text=item)
    else:
        raise InputError(
            f"cannot index a {type(item).__name__}: pass str or engram.Document (decode bytes to text first)"
        )
    if not isinstance(doc.id, str) or not doc.id.strip():
        raise InputError("a document id must be a non-empty string")
    check_unicode(doc.id, f"document id {doc.id!r}")
    if not isinstance(doc.text, str):
        raise InputError(f"document {doc.id!r}: text must be str, not {type(doc.text).__name__}")
    check_unicode(doc.text, f"the text of document {doc.id!r}")
    if "\x00" in doc.text:
        raise InputError(f"document {doc.id!r} contains NUL bytes: it looks binary; index text only")
    if doc.title is not None:
        if not isinstance(doc.title, str):
            raise InputError(f"document {doc.id!r}: title must be a string or None, not {type(doc.title).__name__}")
        check_unicode(doc.title, f"the title of document {doc.id!r}")
    _check_metadata(doc)
    return doc


def check_unicode(value: str, what: str) -> None:
    """Refuse lone surrogates (text decoded with errors="surrogateescape", JSON "\\ud800"): they cannot be stored."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"{what} holds a lone surrogate (U+{ord(value[exc.start]):04X}): it is not valid text"
        ) from None


def _check_metadata(doc: Document) -> None:
    if not isinstance(doc.metadata, Mapping):
        raise InputError(f"document {doc.id!r}: metadata must be a dict, not {type(doc.metadata).__name__}")
    try:  # allow_nan=False: NaN and Infinity would be stored as JSON that other readers refuse
        json.dumps(dict(doc.metadata), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        if "Out of range float" in str(exc):
            raise InputError(
                f"document {doc.id!r}: metadata holds NaN or Infinity, which JSON cannot store: use null or a string"
            ) from None
        raise InputError(
            f"document {doc.id!r}: metadata must be JSON (strings, numbers, lists, dicts): {exc}"
        ) from None


def document_hash(doc: Document) -> str:
    """The hash a stored document is compared by: title, cleaned text and metadata (so a metadata-only change
    is an update). Without metadata it is the hash of title and text alone, as stored by earlier versions."""
    base = f"{doc.title or ''}\x00{clean_text(doc.text)}"
    if doc.metadata:
        base += "\x00" + json.dumps(dict(doc.metadata), sort_keys=True, ensure_ascii=False, default=str)
    return content_hash(base)


def passage_hash(title: str | None, text: str) -> str:
    return content_hash(f"{title or ''}\x00{text}")


def prepare(
    items: Iterable[object],
    known_documents: Mapping[str, str],
    known_passages: Container[str],
    chunking: ChunkConfig,
    replace: Container[str] = (),
    fit: EmbedFit | None = None,
) -> Prepared:
    """Validate, chunk and deduplicate. `known_documents` maps stored doc ids to content hashes and
    `known_passages` holds the stored passage ids (less those of the documents in `replace`). A stored
    document with other content is prepared anew when its id is in `replace`, else refused.

    Each document owns its passages (so deleting one document never touches another's). Identical chunks
    share their expensive parts: the extraction and the embedding are cached by content, so a repeated
    passage costs no LLM call and no embedding. Within one document, a repeated chunk is one passage.

    `fit` (title, chunk) -> bool cuts chunks so that each embedded passage fits the embedder's input. Only
    documents prepared here are chunked: an unchanged stored document keeps the chunks it was stored with."""
    out = Prepared()
    seen_ids: set[str] = set()
    new_ids: set[str] = set()
    for item in items:
        doc = as_document(item)
        if doc.id in seen_ids:
            raise InputError(f"document id {doc.id!r} appears twice in one batch: ids must be unique")
        seen_ids.add(doc.id)
        text = clean_text(doc.text)
        digest = document_hash(doc)
        if known_documents.get(doc.id) == digest:
            out.unchanged += 1
            continue
        if doc.id in known_documents and doc.id not in replace:
            raise InputError(
                f"document {doc.id!r} is already indexed with other content: delete it first or give a new id"
            )
        chunks = chunk_text(text, chunking, _fits(fit, doc.title))
        by_hash: dict[str, str] = {}
        if not chunks:
            out.skipped[doc.id] = "empty"
            continue
        out.documents.append((doc, digest))
        for idx, chunk in enumerate(chunks):
            pid = doc.id if len(chunks) == 1 else f"{doc.id}#{idx}"
            phash = passage_hash(doc.title, chunk)
            if phash in by_hash:
                out.chunks.append((doc.id, idx, by_hash[phash]))
                continue
            if pid in new_ids or pid in known_passages:
                raise InputError(f"passage id {pid!r} is taken by other content: choose another document id")
            new_ids.add(pid)
            by_hash[phash] = pid
            out.passages.append(PassageRow(pid, doc.id, doc.title, chunk, phash, dict(doc.metadata)))
            out.chunks.append((doc.id, idx, pid))
    return out


def _fits(fit: EmbedFit | None, title: str | None) -> Callable[[str], bool] | None:
    if fit is None:
        return None

    def fits(chunk: str) -> bool:
        return fit(title, chunk)

    return fits
