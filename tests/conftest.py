"""Shared fixtures. `fake_llm`: a started scripted OpenAI-compatible server (see tests/fake_openai.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import engram.text  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fake_openai import FakeOpenAI


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    """A fresh scripted server per test; `fake_llm.chat()` gives an OpenAIChat on it (closed afterwards)."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.close()
