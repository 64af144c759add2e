"""`engram --help`, and a subcommand's help, build the parser without the heavy libraries (issue 53): help
answers fast, and the CLI starts without numpy, scipy or the optional extras loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engram.retrieve.method_names import METHODS, PEER_METHODS

HEAVY = {"numpy", "scipy", "torch", "openai", "fastapi"}


def imported_by(*argv: str) -> set[str]:
    """Every module `python -m engram.cli ARGV` imports, from `-X importtime` (one line per module on stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "engram.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: engram")
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("index", "--help"), ("serve", "--help"), ("eval", "--help"), ("retrieve", "--help")],
    ids=lambda argv: " ".join(argv),
)
def test_help_imports_nothing_heavy(argv: tuple[str, ...]) -> None:
    imported = imported_by(*argv)
    assert {"engram.cli", "engram.cli.query", "engram.server.commands"} <= imported  # the whole parser was built
    assert sorted({name.split(".")[0] for name in imported} & HEAVY) == []


def test_the_light_peer_names_are_the_peer_registry() -> None:
    """The peer names the parser offers (engram.retrieve.method_names imports nothing) are the registry's, in
    its order: a peer added to the registry alone would be missing from `--method` and `add-method`."""
    from engram.retrieve.peers import PEERS

    assert tuple(PEERS) == PEER_METHODS
    assert set(PEER_METHODS) <= set(METHODS)
