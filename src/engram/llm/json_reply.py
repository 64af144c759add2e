"""Ask an LLM for a JSON object, and once more when the reply cannot be used.

Extraction (`engram.extract.openie`), the recognition filter and query NER all ask for a JSON object, read
it leniently (`parse_json_object`) and check its shape with a `read` function. A reply that cannot be used
(no JSON object, the wrong shape, or cut off at the length limit) is sent back, shortened (`echo`), with the
reason and a request to reply again; a second unusable reply raises `ExtractionError` with its reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from engram.errors import ExtractionError
from engram.llm import aio
from engram.llm.base import ChatModel, Message, is_async_chat
from engram.llm.failures import LLMTruncatedError
from engram.llm.jsonparse import close_cut_off, echo, parse_json_object

logger = logging.getLogger(__name__)

T = TypeVar("T")
ATTEMPTS = 2  # the first request and one repair


@dataclass(frozen=True)
class JsonRequest:
    """How one kind of JSON request words its repair: `what` names it in debug logs, `cut_off` is the reason
    given for a reply cut off at the length limit, `again` the request that follows the reason."""

    what: str = "reply"
    cut_off: str = "it was cut off at the length limit"
    again: str = "Reply with the JSON object only."
    salvage: bool = False  # a reply cut off at the limit keeps its complete list items (`close_cut_off`)


async def ask_for_json(
    chat: ChatModel,
    messages: list[Message],
    schema: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
) -> str:
    """`chat`'s reply to a JSON request on the shared loop: awaited when the model is async (with `schema`,
    if given), else `complete` on a thread (plain models take no schema). `max_tokens` caps the reply."""
    if is_async_chat(chat):
        if schema is None:
            return await chat.acomplete(messages, json=True, max_tokens=max_tokens)
        return await chat.acomplete(messages, json=True, max_tokens=max_tokens, schema=schema)
    return await aio.to_thread(chat.complete, messages, json=True, max_tokens=max_tokens)


def repair_messages(messages: list[Message], reply: str, reason: str, request: JsonRequest) -> list[Message]:
    """`messages` followed by the unusable reply (shortened) and the request to reply again."""
    return [
        *messages,
        {"role": "assistant", "content": echo(reply)},
        {"role": "user", "content": f"Your reply could not be used: {reason}. {request.again}"},
    ]


async def aask_json(
    chat: ChatModel,
    messages: list[Message],
    read: Callable[[dict[str, Any]], T],
    request: JsonRequest = JsonRequest(),
    schema: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
) -> T:
    """`read` of the JSON object in the reply; an unusable reply is asked about once more. With
    `request.salvage`, a reply cut off at `max_tokens` is read up to its last complete list item instead (a
    small model that loops repeats itself: asking again would loop again). Raises `ExtractionError` (the
    last reason) when the repaired reply is unusable too; LLM call failures (`LLMError`) propagate."""
    reason = "no reply"
    for attempt in range(ATTEMPTS):
        try:
            reply = await ask_for_json(chat, messages, schema, max_tokens)
        except LLMTruncatedError as error:
            reply, reason = error.text, request.cut_off
            closed = close_cut_off(reply) if request.salvage else None
            if closed is not None:
                try:
                    return read(parse_json_object(closed))
                except ExtractionError:
                    logger.debug("a cut-off %s could not be salvaged", request.what)
        else:
            try:
                return read(parse_json_object(reply))
            except ExtractionError as error:
                reason = str(error)
        logger.debug("unreadable %s (attempt %d): %s", request.what, attempt + 1, reason)
        if attempt + 1 < ATTEMPTS:
            messages = repair_messages(messages, reply, reason, request)
    raise ExtractionError(reason)


def ask_json(
    chat: ChatModel,
    messages: list[Message],
    read: Callable[[dict[str, Any]], T],
    request: JsonRequest = JsonRequest(),
    schema: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
) -> T:
    """`aask_json` for synchronous callers (runs on the shared loop; never call it from the loop)."""
    return aio.run(aask_json(chat, messages, read, request, schema, max_tokens))
