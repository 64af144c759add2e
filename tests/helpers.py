"""Small corpora and helpers shared by the memory, CLI and input tests."""

from __future__ import annotations

from typing import Any

from engram import Document

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
