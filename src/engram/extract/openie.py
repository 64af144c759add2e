"""Two-step open information extraction: named entities first, then triples grounded in them.

Step 1 asks for the passage's named entities (`{"entities": [...]}`); step 2 asks for
`{"triples": [[subject, relation, object], ...]}` given the passage and those entities. A step whose reply
cannot be read is asked once more, with the reason appended; a second bad reply makes the whole passage
fail (`ExtractionOutcome.error`), so the caller can retry it on the next run instead of recording an empty
success. Valid JSON that holds no valid triple is a success with no triples.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from engram.errors import ExtractionError, LLMConfigError, LLMError
from engram.llm.base import ChatModel, Message
from engram.llm.jsonparse import parse_json_object
from engram.llm.openai_chat import LLMTruncatedError, LLMUnreachableError
from engram.text import normalize_phrase
from engram.types import Triple

logger = logging.getLogger(__name__)

NER_SYSTEM = (
    "You find the named entities in a passage, to build a knowledge graph. List every specific thing the "
    "passage names: people, organisations, places, works, events, products, dates and quantities. Write "
    "each entity once, as it appears in the passage. Reply with a JSON object only, shaped "
    '{"entities": ["...", "..."]}.'
)

TRIPLES_SYSTEM = (
    "You turn a passage into facts for a knowledge graph. Write each fact as a [subject, relation, object] "
    "triple of short strings. Use the listed named entities as subjects and objects wherever they fit, "
    "and cover everything the passage states about them. Replace pronouns with the names they stand for, "
    "keep relations brief (a verb phrase), and state only what the passage says. Reply with a JSON object "
    'only, shaped {"triples": [["subject", "relation", "object"], ...]}.'
)

_EXAMPLE_PASSAGE = (
    "Lake Bled\n"
    "Lake Bled lies in the Julian Alps of north-western Slovenia, beside the town of Bled. On its small "
    "island stands the Church of the Assumption, which was rebuilt in the 17th century."
)
_EXAMPLE_ENTITIES = [
    "Lake Bled",
    "Julian Alps",
    "Slovenia",
    "Bled",
    "Church of the Assumption",
    "17th century",
]
_EXAMPLE_TRIPLES = [
    ["Lake Bled", "lies in", "Julian Alps"],
    ["Lake Bled", "is located in", "Slovenia"],
    ["Lake Bled", "is beside", "Bled"],
    ["Church of the Assumption", "stands on the island of", "Lake Bled"],
    ["Church of the Assumption", "was rebuilt in", "17th century"],
]


@dataclass
class ExtractionOutcome:
    """What one passage gave: entities and valid triples as written (not normalised), how many triples
    were dropped as invalid, and `error` when the extraction failed (then the lists are empty)."""

    entities: list[str] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    dropped: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _passage_block(text: str, title: str | None) -> str:
    return f"{title}\n{text}" if title else text


def ner_messages(text: str, title: str | None = None) -> list[Message]:
    return [
        {"role": "system", "content": NER_SYSTEM},
        {"role": "user", "content": f"Passage:\n{_EXAMPLE_PASSAGE}"},
        {"role": "assistant", "content": json.dumps({"entities": _EXAMPLE_ENTITIES})},
        {"role": "user", "content": f"Passage:\n{_passage_block(text, title)}"},
    ]


def triple_messages(text: str, entities: Sequence[str], title: str | None = None) -> list[Message]:
    def ask(passage: str, names: Sequence[str]) -> str:
        return f"Passage:\n{passage}\n\nNamed entities: {json.dumps(list(names), ensure_ascii=False)}"

    return [
        {"role": "system", "content": TRIPLES_SYSTEM},
        {"role": "user", "content": ask(_EXAMPLE_PASSAGE, _EXAMPLE_ENTITIES)},
        {"role": "assistant", "content": json.dumps({"triples": _EXAMPLE_TRIPLES})},
        {"role": "user", "content": ask(_passage_block(text, title), entities)},
    ]


def _as_phrase(value: object) -> str | None:
    """A non-empty string (numbers become strings), or None."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    phrase = str(value).strip()
    return phrase if normalize_phrase(phrase) else None


def _read_entities(reply: dict[str, Any]) -> list[str]:
    raw = reply.get("entities")
    if not isinstance(raw, list):
        raise ExtractionError('the JSON object has no "entities" list')
    entities: list[str] = []
    seen: set[str] = set()
    for item in raw:
        phrase = _as_phrase(item)
        if phrase is not None and normalize_phrase(phrase) not in seen:
            seen.add(normalize_phrase(phrase))
            entities.append(phrase)
    return entities


def _as_triple(item: object) -> Triple | None:
    if isinstance(item, dict):
        item = [item.get("subject"), item.get("relation", item.get("predicate")), item.get("object")]
    if not isinstance(item, (list, tuple)) or len(item) != 3:
        return None
    parts = [_as_phrase(part) for part in item]
    if parts[0] is None or parts[1] is None or parts[2] is None:
        return None
    return (parts[0], parts[1], parts[2])


def _read_triples(reply: dict[str, Any]) -> tuple[list[Triple], int]:
    """Valid triples (duplicates after normalisation removed) and the count of invalid ones."""
    raw = reply.get("triples")
    if not isinstance(raw, list):
        raise ExtractionError('the JSON object has no "triples" list')
    triples: list[Triple] = []
    seen: set[tuple[str, ...]] = set()
    dropped = 0
    for item in raw:
        triple = _as_triple(item)
        if triple is None:
            dropped += 1
            continue
        key = tuple(normalize_phrase(part) for part in triple)
        if key not in seen:
            seen.add(key)
            triples.append(triple)
    return triples, dropped


def _ask_json(chat: ChatModel, messages: list[Message], read: Callable[[dict[str, Any]], Any]) -> Any:
    """Ask, parse with `read`; on an unreadable reply ask once more with the reason. Raises
    `ExtractionError` when the second reply is unreadable too."""
    for attempt in range(2):
        try:
            reply = chat.complete(messages, json=True)
        except LLMTruncatedError as error:
            reply, reason = error.text, "it was cut off at the length limit; write a shorter reply"
        else:
            try:
                return read(parse_json_object(reply))
            except ExtractionError as error:
                reason = str(error)
        logger.debug("unreadable extraction reply (attempt %d): %s", attempt + 1, reason)
        if attempt == 1:
            raise ExtractionError(reason)
        messages = [
            *messages,
            {"role": "assistant", "content": reply},
            {
                "role": "user",
                "content": f"Your reply could not be used: {reason}. Reply again with the "
                "JSON object only, in the shape asked for.",
            },
        ]
    raise AssertionError("unreachable")


def extract_passage(chat: ChatModel, text: str, title: str | None = None) -> ExtractionOutcome:
    """Run both steps on one passage. A bad reply or a failed call gives an outcome with `error` set;
    only `LLMConfigError` and `LLMUnreachableError` are raised, since no other passage could escape them."""
    try:
        entities: list[str] = _ask_json(chat, ner_messages(text, title), _read_entities)
        triples, dropped = _ask_json(chat, triple_messages(text, entities, title), _read_triples)
    except (LLMConfigError, LLMUnreachableError):
        raise
    except ExtractionError as error:
        return ExtractionOutcome(error=f"unreadable reply: {error}")
    except LLMError as error:
        return ExtractionOutcome(error=f"LLM call failed: {error}")
    return ExtractionOutcome(entities=entities, triples=triples, dropped=dropped)


def _extract_guarded(chat: ChatModel, text: str, title: str | None) -> ExtractionOutcome:
    try:
        return extract_passage(chat, text, title)
    except (LLMConfigError, LLMUnreachableError):
        raise
    except Exception as error:  # one passage's bug must not sink the run; it is recorded as failed
        logger.debug("extraction crashed", exc_info=True)
        return ExtractionOutcome(error=f"extraction crashed: {type(error).__name__}: {error}")


def extract_many(
    chat: ChatModel,
    passages: Sequence[tuple[str, str, str | None]],
    max_workers: int = 8,
    on_result: Callable[[str, ExtractionOutcome], None] | None = None,
) -> dict[str, ExtractionOutcome]:
    """Extract `(id, text, title)` passages concurrently; call `on_result(id, outcome)` in the calling
    thread as each one finishes, so it can be committed at once. Returns every outcome by id.

    A passage's failure is reported through its outcome, never raised. `LLMConfigError` (bad model, key or
    URL) and `LLMUnreachableError` (server down) abort the run: passages not started are cancelled, the
    ones in flight are awaited, and the error is re-raised. An exception from `on_result` aborts too.
    """
    outcomes: dict[str, ExtractionOutcome] = {}
    if not passages:
        return outcomes
    pool = ThreadPoolExecutor(
        max_workers=max(1, min(max_workers, len(passages))), thread_name_prefix="openie"
    )
    try:
        futures: dict[Future[ExtractionOutcome], str] = {
            pool.submit(_extract_guarded, chat, text, title): pid for pid, text, title in passages
        }
        for future in as_completed(futures):
            pid = futures[future]
            outcome = future.result()
            outcomes[pid] = outcome
            if on_result is not None:
                on_result(pid, outcome)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes
