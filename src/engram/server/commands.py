"""`engram serve` and `engram mcp`: the CLI subcommands of the server. FastAPI, uvicorn, mcp and the memory
(numpy, scipy) are imported only when a command runs, so the CLI starts without the `server` extra and
`engram --help` stays fast."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from engram.cli.common import add_llm_choice
from engram.errors import InputError
from engram.server.settings import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY, ServerSettings, check_bind, load_keys
from engram.store.pg_schema import is_database_url

SERVE_EXAMPLES = """examples:
  engram serve --memory notes.engram                      # one memory, named 'default', on 127.0.0.1:8300
  engram serve --root memories/ --port 8080               # every memory under memories/, by name
  ENGRAM_API_KEYS='a-long-random-key-1234' engram serve --root memories/ --host 0.0.0.0
  engram serve --root memories/ --api-key-file keys.txt   # per-key memories and read-only (see README)
then open http://127.0.0.1:8300/ (web page), or point an MCP client at /mcp; with --docs, /openapi.json is the
OpenAPI schema."""

MCP_EXAMPLES = """examples:
  engram mcp --memory notes.engram                        # MCP over stdio, for Claude Desktop and others
  engram mcp --root memories/ --embedder hash
Claude Desktop (claude_desktop_config.json):
  {"mcpServers": {"engram": {"command": "engram", "args": ["mcp", "--memory", "/path/to/notes.engram"]}}}"""


def configure(sub: Any) -> None:
    """Add `serve` and `mcp` to an argparse subparsers object."""
    serve = sub.add_parser(
        "serve",
        help="serve memories over REST, MCP (/mcp) and a web page",
        description="Serve memories over REST (/v1), MCP streamable HTTP (/mcp) and a web page (/). "
        "Needs the server extra: pip install 'engram[server]'.",
        epilog=SERVE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_source(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8300, help="port (default 8300)")
    serve.add_argument("--api-key-file", help="file of API keys, one per line: KEY [memories=A,B] [read-only]")
    serve.add_argument(
        "--max-body", type=int, default=DEFAULT_MAX_BODY, help=f"largest request body in bytes ({DEFAULT_MAX_BODY})"
    )
    serve.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_BODY_TIMEOUT,
        help=f"seconds a request body may take to arrive; slower ones get 408 ({DEFAULT_BODY_TIMEOUT:g})",
    )
    serve.add_argument(
        "--docs", action="store_true", help="serve the OpenAPI schema at /openapi.json (behind the keys)"
    )
    serve.add_argument(
        "--threads", type=int, help="requests running engram at once (default: 8 per CPU, at least 8)"
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    _add_blas(serve)
    serve.set_defaults(func=cmd_serve)
    mcp = sub.add_parser(
        "mcp",
        help="serve memories to an MCP client over stdio",
        description="Serve memories as MCP tools (remember, recall, answer, forget, list_memories, stats, "
        "list_documents) over stdio. Needs the server extra: pip install 'engram[server]'.",
        epilog=MCP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_source(mcp)
    _add_blas(mcp)
    mcp.set_defaults(func=cmd_mcp)


def _add_blas(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads per request (default 1: requests already run in parallel, and nested BLAS threads "
        "make concurrent retrieval many times slower)",
    )


def limit_blas(threads: int) -> None:
    """Cap numpy's BLAS thread pool for this process (threadpoolctl, in the server extra)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # numpy is loaded already: environment variables would come too late
        logging.getLogger("engram.server").warning("threadpoolctl is missing: BLAS threads are not limited")
        return
    threadpool_limits(limits=threads)


def _add_source(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--memory", "-m", help="serve this memory (a directory or postgresql:// URL) as 'default'")
    where.add_argument("--root", help="serve every memory under this folder by name (created on first write)")
    p.add_argument(
        "--embedder",
        help="embedder spec (default: $ENGRAM_EMBEDDER, the memory's config, the one it was written with, MiniLM)",
    )
    add_llm_choice(p)
    p.add_argument("--llm-base-url", help="OpenAI-compatible base URL (default: $ENGRAM_LLM_BASE_URL)")
    p.add_argument("--llm-model", help="chat model name (default: $ENGRAM_LLM_MODEL)")
    p.add_argument("--llm-concurrency", type=int, help="LLM requests in flight at most per memory")


def _memory_target(memory: str | None) -> Path | str | None:
    """--memory as `Memory` takes it: a directory, or a postgresql:// URL kept as text."""
    from engram.settings import check_target

    check_target(memory)
    if memory is None or is_database_url(memory):
        return memory
    return Path(memory)


def _check_numbers(args: argparse.Namespace) -> None:
    port = getattr(args, "port", 8300)
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port} is not a port: use 1-65535 (0 picks a free one)")
    for name in ("threads", "max_body", "blas_threads", "llm_concurrency"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")
    if args.memory and not is_database_url(args.memory) and Path(args.memory).is_file():
        raise InputError(f"--memory {args.memory} is a file; a memory is a directory")
    if args.root and Path(args.root).is_file():
        raise InputError(f"--root {args.root} is a file: name the folder that holds (or will hold) the memories")


def settings_from(args: argparse.Namespace, keys: bool = True) -> ServerSettings:
    _check_numbers(args)
    threads = getattr(args, "threads", None)
    return ServerSettings(
        root=Path(args.root) if args.root else None,
        memory=_memory_target(args.memory),
        host=getattr(args, "host", "127.0.0.1"),
        port=getattr(args, "port", 8300),
        keys=load_keys(getattr(args, "api_key_file", None)) if keys else [],
        max_body=getattr(args, "max_body", DEFAULT_MAX_BODY),
        body_timeout=getattr(args, "body_timeout", DEFAULT_BODY_TIMEOUT),
        docs=getattr(args, "docs", False),
        embedder=args.embedder,
        llm_base_url=args.llm_base_url,
        llm_model=args.llm_model,
        llm_concurrency=args.llm_concurrency,
        **({"request_threads": threads} if threads else {}),
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from engram.server import require_server_extra

    require_server_extra()
    settings = settings_from(args)
    check_bind(settings.host, settings.keys)
    limit_blas(args.blas_threads)
    import uvicorn

    from engram.server.app import create_app

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    auth = f"{len(settings.keys)} API keys" if settings.keys else "no API keys (loopback only)"
    print(f"engram serve: http://{settings.host}:{settings.port}/ ({auth}); Ctrl-C stops", file=sys.stderr)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from engram.server import require_server_extra

    require_server_extra()
    from engram.server.auth import Access
    from engram.server.jobs import Jobs
    from engram.server.mcp_tools import build_mcp
    from engram.server.registry import Registry
    from engram.server.service import Service
    from engram.server.stdio_guard import answered_stdio

    settings = settings_from(args, keys=False)
    limit_blas(args.blas_threads)
    registry, jobs = Registry(settings), Jobs(settings.job_workers)
    try:
        with answered_stdio():  # malformed lines get a JSON-RPC error instead of silence
            build_mcp(Service(registry, jobs), Access([])).run("stdio")
    finally:
        jobs.close()
        registry.close()
    return 0
