"""Small corpora and helpers shared by the memory, CLI and input tests."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram import Document
from engram.embed import HashEmbedder
from engram.embed.base import Progress, Role, Vectors

DOCS = [
    Document("acme", "Alice Moreau founded Acme Tools in 1998 in a small garage.", title="Acme Tools"),
    Document("alice", "Alice Moreau was born in the city of Lyon.", title="Alice Moreau"),
    Document("lyon", "Lyon is a city on the Rhone river in France.", title="Lyon"),
    Document("bob", "Bob Stein founded Zenith Foods and was born in Oslo.", title="Zenith Foods"),
    Document("oslo", "Oslo is the capital of Norway.", title="Oslo"),
]

EXTRACTIONS = [
    {
        "id": "acme",
        "entities": ["Alice Moreau", "Acme Tools"],
        "triples": [["Acme Tools", "founded by", "Alice Moreau"], ["Acme Tools", "founded in", "1998"]],
    },
    {"id": "alice", "entities": ["Alice Moreau", "Lyon"], "triples": [["Alice Moreau", "born in", "Lyon"]]},
    {
        "id": "lyon",
        "entities": ["Lyon", "France"],
        "triples": [["Lyon", "located in", "France"], ["Lyon", "on river", "Rhone"]],
    },
    {
        "id": "bob",
        "entities": ["Bob Stein", "Zenith Foods", "Oslo"],
        "triples": [["Zenith Foods", "founded by", "Bob Stein"], ["Bob Stein", "born in", "Oslo"]],
    },
    {"id": "oslo", "entities": ["Oslo", "Norway"], "triples": [["Oslo", "capital of", "Norway"]]},
]


def cli_refused(capsys: Any, argv: list[str]) -> str:
    """Run the CLI; it must exit 1 with one "engram: error:" line and no traceback. Returns that line."""
    from engram.cli import main

    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("engram: error:"), err
    return str(last)


def fake_llm_env(base_url: str) -> dict[str, str]:
    """The environment of an `engram` subprocess that talks to the scripted LLM server at `base_url`."""
    return {
        **os.environ,
        "ENGRAM_LLM_BASE_URL": base_url,
        "ENGRAM_LLM_MODEL": "fake-model",
        "ENGRAM_LLM_CONCURRENCY": "4",
        "OPENAI_API_KEY": "test-key",
        "HF_HUB_OFFLINE": "1",
    }


def build_small(path: Path) -> Path:
    """A memory of DOCS with EXTRACTIONS at `path`, with the hash embedder (closed again)."""
    from engram import Memory
    from engram.embed import HashEmbedder

    with Memory(path, embedder=HashEmbedder()) as memory:
        memory.index(DOCS, extractions=EXTRACTIONS)
    return path


class CountingEmbedder(HashEmbedder):
    """A hash embedder that counts the texts it was asked to embed (`embedded`): what a memory computed
    rather than took from its vector cache."""

    def __init__(self, dim: int = 256) -> None:
        super().__init__(dim)
        self.embedded = 0

    def embed(self, texts: Sequence[str], role: Role = "passage", progress: Progress | None = None) -> Vectors:
        self.embedded += len(texts)
        return super().embed(texts, role, progress)
