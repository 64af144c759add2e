from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram import Document, InputError, Memory
from engram.embed import HashEmbedder
from engram.extract.importers import load_extractions


def test_official_hipporag_openie_file_is_matched_by_text(tmp_path: Path) -> None:
    path = tmp_path / "openie_results_ner_gpt-4o-mini.json"
    path.write_text(json.dumps({
        "docs": [
            {"idx": "h1", "passage": "Acme Tools\nAlice Moreau founded Acme Tools.",
             "extracted_entities": ["Alice Moreau", "Acme Tools"],
             "extracted_triples": [["Alice Moreau", "founded", "Acme Tools"]]},
            {"idx": "h2", "passage": "Lyon is in France.", "extracted_entities": ["Lyon", "France"],
             "extracted_triples": [["Lyon", "is in", "France"], ["broken"]]},
        ],
        "avg_ent_chars": 8.0,
    }))
    found = load_extractions(path)
    assert len(found.by_text) == 2 and not found.by_id
    docs = [Document("a", "Alice Moreau founded Acme Tools.", title="Acme Tools"), Document("b", "Lyon is in France.")]
    with Memory(tmp_path / "m", embedder=HashEmbedder()) as memory:
        report = memory.index(docs, extractions=path)
        assert report.imported == 2 and report.pending == 0 and report.dropped_triples == 1
        assert memory.stats()["facts"] == 2


def test_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "entities": [], "triples": []}\n{not json}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:2"):
        load_extractions(path)
    path.write_text('{"entities": [], "triples": []}\n')
    with pytest.raises(InputError, match="needs an 'id'"):
        load_extractions(path)
