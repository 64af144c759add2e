"""Precomputed extractions: engram's JSONL format and the official HippoRAG OpenIE results.

* JSONL (also the shared data's format): one object a line, {"id": passage id, "entities": [...],
  "triples": [[s, r, o], ...]}. Matched to passages by passage id (a one-chunk document's passage id is its
  document id).
* HippoRAG's `openie_results_ner_*.json`: {"docs": [{"passage": text, "extracted_entities": [...],
  "extracted_triples": [...]}, ...]}. Matched to passages by their text (with or without the title line).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.errors import InputError
from engram.text import clean_text, content_hash, normalize_phrase


@dataclass
class ExtractionSet:
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_text: dict[str, dict[str, Any]] = field(default_factory=dict)  # content hash of the text -> record
    source: str = "import"

    def __len__(self) -> int:
        return len(self.by_id) + len(self.by_text)

    def find(
        self, passage_id: str, title: str | None, text: str, doc_id: str | None = None
    ) -> dict[str, Any] | None:
        """The record for a passage: by passage id (a one-chunk document's passage id is the document id), else
        by text. A chunk `<doc id>#<i>` without its own record takes from its document's record only what the
        chunk states: the triples whose subject and object both occur in its text, and the entities that
        occur in it (None when nothing does: the chunk stays pending). `doc_id`, the passage's document when
        known, tells a chunk from a document whose own id ends in `#<i>` (which takes no other's record)."""
        found = self.by_id.get(passage_id)
        if found is None and (doc_id is None or passage_id.rpartition("#")[0] == doc_id):
            found = self._from_document(passage_id, text)
        if found is None and self.by_text:
            found = self.by_text.get(content_hash(text))
            if found is None and title:
                found = self.by_text.get(content_hash(f"{title}\n{text}"))
        return found


    def _from_document(self, passage_id: str, text: str) -> dict[str, Any] | None:
        doc_id, sep, index = passage_id.rpartition("#")
        record = self.by_id.get(doc_id) if sep and index.isdigit() else None
        if record is None:
            return None
        words = f" {normalize_phrase(text)} "

        def stated(phrase: object) -> bool:
            key = normalize_phrase(str(phrase))
            return bool(key) and f" {key} " in words

        triples = [
            t
            for t in record["triples"]
            if isinstance(t, (list, tuple)) and len(t) == 3 and stated(t[0]) and stated(t[2])
        ]
        entities = [e for e in record["entities"] if stated(e)]
        return {"entities": entities, "triples": triples} if triples else None


def _record(entities: Any, triples: Any, where: str) -> dict[str, Any]:
    if not isinstance(triples, list) or not isinstance(entities, (list, type(None))):
        raise InputError(f"{where}: 'triples' must be a list (and 'entities' a list)")
    return {"entities": [str(e) for e in entities or []], "triples": triples}


def load_extractions(path: str | Path) -> ExtractionSet:
    """Read either format, deciding by content. Malformed triples are kept here and dropped (with a
    count) when the graph is built; a malformed line or file is an InputError naming it."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read extractions file {path}: {exc}") from exc
    stripped = raw.lstrip()
    if stripped.startswith("{") and '"docs"' in stripped[:4096]:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        except RecursionError as exc:
            raise InputError(f"cannot read extractions file {path}: JSON nested too deeply") from exc
        if isinstance(data, dict) and isinstance(data.get("docs"), list):
            return _from_hipporag(data["docs"], path)
    out = ExtractionSet(source=f"import:{path.name}")
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise InputError(f"{path}:{number}: JSON nested too deeply to read") from exc
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise InputError(f"{path}:{number}: each line needs an 'id' string, 'entities' and 'triples'")
        out.by_id[row["id"]] = _record(row.get("entities"), row.get("triples", []), f"{path}:{number}")
    return out


def _from_hipporag(docs: list[Any], path: Path) -> ExtractionSet:
    out = ExtractionSet(source=f"import:{path.name}")
    for number, doc in enumerate(docs):
        if not isinstance(doc, dict) or not isinstance(doc.get("passage"), str):
            raise InputError(f"{path}: docs[{number}] has no 'passage' text")
        record = _record(doc.get("extracted_entities"), doc.get("extracted_triples", []), f"{path}: docs[{number}]")
        out.by_text[content_hash(clean_text(doc["passage"]).strip())] = record
    return out


def as_extraction_set(value: ExtractionSet | str | Path | Iterable[dict[str, Any]] | None) -> ExtractionSet:
    """Extractions given to `Memory.index`: a loaded set, a path to either file format, or rows
    {"id", "entities", "triples"}."""
    if value is None:
        return ExtractionSet()
    if isinstance(value, ExtractionSet):
        return value
    if isinstance(value, (str, Path)):
        return load_extractions(value)
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise InputError("extractions are a path, an ExtractionSet or a list of {'id', 'entities', 'triples'} rows")
    out = ExtractionSet(source="import")
    for number, row in enumerate(value):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise InputError(f"extraction {number}: each needs an 'id' string, 'entities' and 'triples'")
        triples = row.get("triples")
        triples = [] if triples is None else list(triples) if isinstance(triples, tuple) else triples
        out.by_id[row["id"]] = _record(row.get("entities"), triples, f"extraction {row['id']!r}")
    return out
