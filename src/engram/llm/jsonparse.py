"""Read one JSON object out of an LLM reply, without `eval`.

Models wrap JSON in code fences, surround it with prose, leave trailing commas, use single quotes or write
Python literals (`True`, `None`). `parse_json_object` copes with those; anything else, including a reply cut
off before its object closes, raises `ExtractionError` with the reason. Every step is a single linear scan,
so no input can make it hang.
"""

from __future__ import annotations

import json
import re
from typing import Any

from engram.errors import ExtractionError

_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_CLOSERS = "}]"
MAX_ECHO_CHARS = 2000  # how much of an unreadable reply a repair request sends back


def echo(reply: str) -> str:
    """What a repair request sends back of an unreadable reply: at most `MAX_ECHO_CHARS` characters (a runaway
    reply of megabytes must not be sent back to the server, nor cost its tokens again)."""
    if len(reply) <= MAX_ECHO_CHARS:
        return reply
    return f"{reply[:MAX_ECHO_CHARS]}\n[... {len(reply) - MAX_ECHO_CHARS} more characters cut]"


def parse_json_object(text: str) -> dict[str, Any]:
    """The outermost JSON object in `text`, leniently repaired. Raises `ExtractionError` if there is none."""
    if not text or not text.strip():
        raise ExtractionError("the reply is empty")
    reasons: list[str] = []
    for candidate in _candidates(text):
        try:
            return _parse_candidate(candidate)
        except ExtractionError as error:
            reasons.append(str(error))
    if not reasons:
        raise ExtractionError("the reply contains no JSON object")
    raise ExtractionError(reasons[0])


def _candidates(text: str) -> list[str]:
    """Fenced blocks first (in order), then the whole reply."""
    blocks = [m.group(1) for m in _FENCE.finditer(text) if "{" in m.group(1)]
    return [*blocks, text] if blocks else [text]


def _parse_candidate(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text.strip())
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        return value
    truncated = False
    first_error: str | None = None
    for start, end in _top_level_objects(text):
        if end is None:
            truncated = True
            break
        try:
            return _load_object(text[start:end])
        except ExtractionError as error:
            first_error = first_error or str(error)
    if truncated:
        raise ExtractionError("the reply ends before its JSON object is closed (cut off?)")
    if first_error is not None:
        raise ExtractionError(first_error)
    if isinstance(value, list):
        raise ExtractionError("the reply is a JSON list, not the JSON object asked for")
    raise ExtractionError("the reply contains no JSON object")


def close_cut_off(text: str) -> str | None:
    """A reply cut off inside its JSON object, ended after its last complete item of a list (an array, an
    object or a string inside `[...]`) with the brackets still open closed; None when no item completed.
    `{"triples": [["a", "b", "c"], ["d", "e` becomes `{"triples": [["a", "b", "c"]]}`. One linear scan."""
    start = text.find("{")
    if start < 0:
        return None
    closers: list[str] = []
    cut: tuple[int, str] | None = None
    in_string, escaped = False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if closers and closers[-1] == "]":
                    cut = (i + 1, "".join(reversed(closers)))
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            closers.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not closers or closers[-1] != ch:
                return None
            closers.pop()
            if not closers:
                return text[start : i + 1]
            if closers[-1] == "]":
                cut = (i + 1, "".join(reversed(closers)))
    return None if cut is None else text[start : cut[0]] + cut[1]


def _top_level_objects(text: str) -> list[tuple[int, int | None]]:
    """Spans of the balanced `{...}` regions that are not inside another one. The last span has end None
    when the text ends inside it. Quotes count only inside a region (prose apostrophes are harmless)."""
    spans: list[tuple[int, int | None]] = []
    depth, start, quote, escaped = 0, 0, "", False
    for i, ch in enumerate(text):
        if depth == 0:
            if ch == "{":
                depth, start = 1, i
            continue
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    if depth > 0:
        spans.append((start, None))
    return spans


def _load_object(fragment: str) -> dict[str, Any]:
    try:
        value = json.loads(fragment)
    except (ValueError, RecursionError):
        try:
            value = json.loads(_repair(fragment))
        except (ValueError, RecursionError) as error:
            raise ExtractionError(f"invalid JSON: {error}") from error
    if not isinstance(value, dict):
        raise ExtractionError("the reply's JSON is not an object")
    return value


def _repair(fragment: str) -> str:
    """Rewrite single-quoted strings as JSON strings, drop trailing commas, map Python literals."""
    out: list[str] = []
    i, n = 0, len(fragment)
    while i < n:
        ch = fragment[i]
        if ch in "\"'":
            end = _string_end(fragment, i)
            out.append(_requote(fragment[i + 1 : end], ch))
            i = end + 1
        elif ch == ",":
            j = i + 1
            while j < n and fragment[j].isspace():
                j += 1
            if j >= n or fragment[j] not in _CLOSERS:
                out.append(ch)
            i += 1
        elif ch.isalpha():
            j = i
            while j < n and (fragment[j].isalnum() or fragment[j] == "_"):
                j += 1
            word = fragment[i:j]
            out.append(_PY_LITERALS.get(word, word))
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _string_end(text: str, start: int) -> int:
    """Index of the quote closing the string opened at `start` (len(text) if it never closes)."""
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i
        i += 1
    return len(text)


def _requote(body: str, quote: str) -> str:
    """The JSON (double-quoted) form of a string literal body written between `quote` characters."""
    if quote == '"':
        return f'"{body}"'
    chars: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            chars.append("'" if nxt == "'" else ch + nxt)
            i += 2
            continue
        chars.append('\\"' if ch == '"' else ch)
        i += 1
    return '"' + "".join(chars) + '"'
