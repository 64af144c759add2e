"""A real PostgreSQL with pgvector for the tests: `pgserver` (a dev dependency) ships PostgreSQL 16 and the
vector extension. The server starts once per test session in a temporary directory, listening on a Unix socket
there, and is stopped and deleted at the end. As root (CI), pgserver runs PostgreSQL as a system user
`pgserver` it creates, since PostgreSQL refuses to run as root.

Import the fixtures into a test module: `from pg_fixture import pg_server, pg_url  # noqa: F401`."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def with_schema(uri: str, schema: str) -> str:
    """`uri` with engram's `schema` parameter (one memory per schema)."""
    return f"{uri}{'&' if '?' in uri else '?'}schema={schema}"


def backend_place(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Path | str]:
    """For a fixture parametrised over "directory" and "postgres": name -> where a fresh memory of that name
    lives on the backend under test (a folder of `tmp_path`, or a schema of its own on the session's server)."""
    if request.param == "directory":
        return lambda name: tmp_path / name
    server = request.getfixturevalue("pg_server")
    prefix = f"m{uuid.uuid4().hex[:8]}"
    return lambda name: with_schema(server, f"{prefix}_{name}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The connection URI of a PostgreSQL server with pgvector, for the whole session."""
    try:
        import pgserver
    except ImportError:
        pytest.skip("pgserver is not installed (pip install -e '.[dev]'): the PostgreSQL backend is not tested")
    folder = tempfile.mkdtemp(prefix="engram-pg-")
    try:
        server = pgserver.get_server(folder, cleanup_mode="delete")
    except Exception as exc:  # any failure to start (permissions, a missing library): say why, skip
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"PostgreSQL (pgserver) could not start: {type(exc).__name__}: {exc}")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A memory URL in a fresh schema of the session's server."""
    return with_schema(pg_server, f"t_{uuid.uuid4().hex[:12]}")
