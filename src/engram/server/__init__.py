"""`engram serve` and `engram mcp`: a memory service over REST (/v1), MCP (stdio and /mcp) and a web page (/).

Everything served is the public `engram.Memory` API. This package needs the `server` extra
(`pip install 'engram[server]'`); importing `engram` never imports it, and `engram.server.commands` (the CLI
subcommands) imports FastAPI, uvicorn and mcp only when a command runs.
"""

from __future__ import annotations

from engram.errors import MissingDependencyError

__all__ = ["require_server_extra"]


def require_server_extra() -> None:
    """Raise a clear error when the `server` extra is not installed."""
    missing = []
    for module in ("fastapi", "uvicorn", "mcp"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise MissingDependencyError(
            f"engram serve needs {', '.join(missing)}: install them with pip install 'engram[server]'"
        )
