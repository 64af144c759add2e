"""What `engram mcp` puts between the client and the MCP SDK's stdio transport.

The SDK drops a line it cannot read without a word: a malformed line gets no JSON-RPC parse error, and a request
holding a lone surrogate (`"\\ud800"`, which Python's JSON reads but the SDK's parser refuses) never gets an
answer, so the client waits for ever. `answered_stdio()` reads stdin first: a line that is not a JSON-RPC
message is answered here (-32700 parse error, or -32600 with the request's id), the others go on to the SDK
unchanged. The SDK's replies pass through the same writer, one whole line at a time, so the two never mix.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO, Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def problem_reply(line: bytes) -> bytes | None:
    """The JSON-RPC error line to answer `line` with, or None when it is for the SDK (blank lines are
    skipped: b"" is returned, meaning "nothing to forward, nothing to answer")."""
    if not line.strip():
        return b""
    try:
        message = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return _error(None, PARSE_ERROR, f"Parse error: the line is not UTF-8 (byte {exc.start})")
    except (ValueError, RecursionError) as exc:
        return _error(None, PARSE_ERROR, f"Parse error: not JSON ({exc})")
    request_id = message.get("id") if isinstance(message, dict) else None
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        request_id = None
    surrogate = _lone_surrogate(message)
    if surrogate is not None:
        if request_id is None and isinstance(message, dict) and "method" in message:
            return b""  # a notification is never answered, so it is dropped here
        return _error(
            request_id,
            INVALID_REQUEST,
            f"Invalid request: it holds a lone surrogate (U+{ord(surrogate):04X}), which is not text; "
            "send valid UTF-8",
        )
    import mcp_types

    try:
        mcp_types.jsonrpc_message_adapter.validate_python(message, by_name=False)
    except ValueError:  # pydantic's ValidationError
        return _error(
            request_id,
            INVALID_REQUEST,
            'Invalid request: not a JSON-RPC 2.0 message ({"jsonrpc": "2.0", "method": ..., "id": ...}, or a '
            "result or error with the id it answers)",
        )
    return None


def _lone_surrogate(value: Any) -> str | None:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


def _error(request_id: str | int | None, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(body).encode("utf-8") + b"\n"


@contextmanager
def answered_stdio() -> Iterator[None]:
    """While inside, fd 0 and fd 1 are pipes: a thread reads the real stdin line by line and answers the lines
    the SDK would drop (`problem_reply`), another copies the SDK's output to the real stdout. On exit the
    descriptors are restored and the SDK's last replies are written out."""
    saved_in, saved_out = os.dup(0), os.dup(1)
    to_sdk_r, to_sdk_w = os.pipe()
    from_sdk_r, from_sdk_w = os.pipe()
    os.dup2(to_sdk_r, 0)
    os.dup2(from_sdk_w, 1)
    os.close(to_sdk_r)
    os.close(from_sdk_w)
    real_out = os.fdopen(os.dup(saved_out), "wb")
    lock = threading.Lock()

    def write(data: bytes) -> None:
        with lock:
            real_out.write(data)
            real_out.flush()

    def read_stdin(source: IO[bytes], sink: IO[bytes]) -> None:
        try:
            with source, sink:
                for line in source:
                    reply = problem_reply(line)
                    if reply is None:
                        sink.write(line if line.endswith(b"\n") else line + b"\n")
                        sink.flush()
                    elif reply:
                        write(reply)
        except (OSError, ValueError):  # the SDK stopped reading, or the client went away
            pass

    def copy_replies(source: IO[bytes]) -> None:
        try:
            with source:
                for line in source:
                    write(line)
        except (OSError, ValueError):
            pass

    reader = threading.Thread(
        target=read_stdin, args=(os.fdopen(os.dup(saved_in), "rb"), os.fdopen(to_sdk_w, "wb")), daemon=True
    )
    writer = threading.Thread(target=copy_replies, args=(os.fdopen(from_sdk_r, "rb"),), daemon=True)
    reader.start()
    writer.start()
    try:
        yield
    finally:
        os.dup2(saved_in, 0)  # the last descriptors of the pipes to the SDK close: the copier reads EOF
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
        writer.join(timeout=10)
        with suppress(OSError):
            real_out.close()
