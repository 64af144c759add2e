"""One background event loop per process that runs every async LLM and embedding call.

Callers stay synchronous (`ChatModel.complete`, `Memory.index`) while the work underneath is async: `run`
hands a coroutine to the loop thread and waits for it, `submit` returns a `concurrent.futures.Future`. One
shared loop means one place where concurrency limits apply, and async SDK clients (bound to the loop they
first ran on) always run on the same loop. The loop thread is a daemon started on first use, and restarted in
a child process after `fork`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_state: dict[str, Any] = {"loop": None, "thread": None, "pid": None, "bridge": None}


def loop() -> asyncio.AbstractEventLoop:
    """The shared loop, started on first use."""
    with _lock:
        current = _state["loop"]
        if current is not None and _state["pid"] == os.getpid():
            return current  # type: ignore[no-any-return]
        fresh = asyncio.new_event_loop()
        thread = threading.Thread(target=_serve, args=(fresh,), name="engram-llm-loop", daemon=True)
        thread.start()
        _state.update(loop=fresh, thread=thread, pid=os.getpid(), bridge=None)
        return fresh


def _serve(running: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(running)
    running.run_forever()


def in_loop_thread() -> bool:
    return _state["thread"] is threading.current_thread() and _state["pid"] == os.getpid()


def submit(coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule `coroutine` on the shared loop."""
    return asyncio.run_coroutine_threadsafe(coroutine, loop())


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the shared loop and wait for its result (the calling thread blocks).

    Calling this from the loop thread itself would wait forever, so it raises RuntimeError there instead: code
    running on the loop must `await` the async method. An interrupt in the calling thread cancels the call.
    """
    if in_loop_thread():
        coroutine.close()
        raise RuntimeError("a blocking LLM call was made from the engram event loop: await the async method")
    future = submit(coroutine)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _bridge() -> concurrent.futures.ThreadPoolExecutor:
    with _lock:
        if _state["bridge"] is None:
            _state["bridge"] = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="engram-sync-bridge")
        return _state["bridge"]  # type: ignore[no-any-return]


async def to_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await a blocking function (a synchronous ChatModel, SQLite) on a thread pool wide enough that it never
    becomes the concurrency limit (the default executor has only a handful of threads)."""
    running = asyncio.get_running_loop()
    return await running.run_in_executor(_bridge(), lambda: function(*args, **kwargs))
