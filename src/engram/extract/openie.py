"""Two-step open information extraction: named entities first, then triples grounded in them.

Step 1 asks for the passage's named entities (`{"entities": [...]}`); step 2 asks for
`{"triples": [[subject, relation, object], ...]}` given the passage and those entities. A step whose reply
cannot be read is asked once more, with the reason appended; a second bad reply makes the whole passage
fail (`ExtractionOutcome.error`), so the caller can retry it on the next run instead of recording an empty
success. Valid JSON that holds no valid triple is a success with no triples.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

from engram.errors import ExtractionError, LLMConfigError, LLMError
from engram.llm import aio
from engram.llm.base import ChatModel, Message
from engram.llm.failures import LLMTruncatedError, LLMUnreachableError
from engram.llm.json_reply import JsonRequest, aask_json, ask_for_json
from engram.text import normalize_phrase
from engram.tokens import count_tokens
from engram.types import Triple

logger = logging.getLogger(__name__)

# what one LLM reply may add to the graph: a passage is a few hundred tokens, so more is a runaway reply
MAX_ENTITIES = 100  # entities kept per passage
MAX_TRIPLES = 200  # triples kept per passage (the rest are counted as dropped)
MAX_PHRASE_CHARS = 200  # a longer "phrase" (entity, subject, relation or object) is dropped

# The reply cap of each step, (base, per passage token): an entity list is shorter than its passage plus the
# JSON around each name; the triples restate the passage's facts, about as long again per fact's subject.
# A reply that reaches its cap is a model repeating itself (small models loop): it is cut there and its
# complete items kept, instead of decoding until the server's context is full.
NER_REPLY_CAP = (128, 1.5)
TRIPLES_REPLY_CAP = (256, 3.0)
MAX_REPLY_TOKENS = 4096


def reply_cap(cap: tuple[int, float], passage: str) -> int:
    """The most tokens a reply about `passage` may take under `cap` (at most `MAX_REPLY_TOKENS`)."""
    base, per_token = cap
    return min(MAX_REPLY_TOKENS, int(base + per_token * count_tokens(passage)))


# The version of the prompts below (and of how replies are read). Change it whenever they change: a memory
# records "MODEL-IDENTITY PROMPT_VERSION" with each LLM extraction, and `engram extract --redo other`
# re-extracts what another model or another prompt version made.
PROMPT_VERSION = "openie/1"


def extractor_identity(model_identity: str) -> str:
    """What a memory records as the source of an extraction made by the model `model_identity`."""
    return f"{model_identity} {PROMPT_VERSION}"


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
    return phrase if len(phrase) <= MAX_PHRASE_CHARS and normalize_phrase(phrase) else None


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
            if len(entities) == MAX_ENTITIES:
                break
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
        if key in seen:
            continue
        if len(triples) == MAX_TRIPLES:
            dropped += 1
            continue
        seen.add(key)
        triples.append(triple)
    return triples, dropped


ENTITY_SCHEMA: dict[str, Any] = {
    "name": "named_entities",
    "schema": {
        "type": "object",
        "properties": {"entities": {"type": "array", "items": {"type": "string"}}},
        "required": ["entities"],
        "additionalProperties": False,
    },
}
TRIPLE_SCHEMA: dict[str, Any] = {
    "name": "triples",
    "schema": {
        "type": "object",
        "properties": {
            "triples": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3},
            }
        },
        "required": ["triples"],
        "additionalProperties": False,
    },
}


EXTRACTION_REQUEST = JsonRequest(
    what="extraction reply",
    cut_off="it was cut off at the length limit; write a shorter reply",
    again="Reply again with the JSON object only, in the shape asked for.",
    salvage=True,
)


async def aextract_passage(chat: ChatModel, text: str, title: str | None = None) -> ExtractionOutcome:
    """`extract_passage` as a coroutine on the shared loop (`engram.llm.aio`)."""
    block = _passage_block(text, title)
    try:
        entities = await aask_json(
            chat, ner_messages(text, title), _read_entities, EXTRACTION_REQUEST, ENTITY_SCHEMA,
            reply_cap(NER_REPLY_CAP, block),
        )  # fmt: skip
        triples, dropped = await aask_json(
            chat, triple_messages(text, entities, title), _read_triples, EXTRACTION_REQUEST, TRIPLE_SCHEMA,
            reply_cap(TRIPLES_REPLY_CAP, block),
        )  # fmt: skip
    except (LLMConfigError, LLMUnreachableError):
        raise
    except ExtractionError as error:
        return ExtractionOutcome(error=f"unreadable reply: {error}")
    except LLMError as error:
        return ExtractionOutcome(error=f"LLM call failed: {error}")
    except Exception as error:  # one passage's bug must not sink the run; it is recorded as failed
        logger.debug("extraction crashed", exc_info=True)
        return ExtractionOutcome(error=f"extraction crashed: {type(error).__name__}: {error}")
    return ExtractionOutcome(entities=entities, triples=triples, dropped=dropped)


def extract_passage(chat: ChatModel, text: str, title: str | None = None) -> ExtractionOutcome:
    """Run both steps on one passage. A bad reply or a failed call gives an outcome with `error` set;
    only `LLMConfigError` and `LLMUnreachableError` are raised, since no other passage could escape them."""
    return aio.run(aextract_passage(chat, text, title))


Passage = tuple[str, str, "str | None"]  # (id, text, title)
_Delivery = Callable[["tuple[str, ExtractionOutcome] | None"], None]


def extract_many(
    chat: ChatModel,
    passages: Iterable[tuple[str, str, str | None]],
    max_workers: int = 8,
    on_result: Callable[[str, ExtractionOutcome], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, ExtractionOutcome]:
    """Extract `(id, text, title)` passages, `max_workers` passages at a time (each has one request in flight
    at most; the chat model's own limit caps requests across everything). `on_result(id, outcome)` is called
    in the calling thread as each passage finishes, so it can be committed at once. Returns the outcomes by id.
    `passages` may be an iterator: an item is taken from it when a slot frees (in the event loop's thread).

    Until the first reply arrives only one passage runs (a misconfigured server costs one request).
    `should_stop()` is asked before each passage starts: once it returns True no passage starts, the ones in
    flight finish and are reported, and the passages never started are left out of the result (a budget).

    A passage's failure is reported through its outcome, never raised. `LLMConfigError` (bad model, key or
    URL) and `LLMUnreachableError` (server down) abort the run: no further passage starts, the ones in flight
    are cancelled, and the error is re-raised. An exception from `on_result` (or an interrupt) aborts too.
    """
    outcomes: dict[str, ExtractionOutcome] = {}
    items: Iterator[Passage] = passages if isinstance(passages, Iterator) else iter(list(passages))
    if isinstance(passages, Sized) and not len(passages):
        return outcomes
    results: queue.SimpleQueue[tuple[str, ExtractionOutcome] | None] = queue.SimpleQueue()
    finished = threading.Event()
    future = aio.submit(_run_all(chat, items, max(1, max_workers), results.put, should_stop, finished))
    try:
        while (item := results.get()) is not None:
            outcomes[item[0]] = item[1]
            if on_result is not None:
                on_result(*item)
    except BaseException:
        future.cancel()
        finished.wait(timeout=30)
        raise
    future.result()
    return outcomes


class _Watched:
    """The chat model, with an event set when its first reply arrives (the probe is over)."""

    def __init__(self, chat: ChatModel) -> None:
        self.chat = chat
        self.identity = chat.identity
        self.answered = asyncio.Event()

    def complete(self, messages: list[Message], *, json: bool = False, max_tokens: int | None = None) -> str:
        raise RuntimeError("only acomplete is used")

    async def acomplete(
        self,
        messages: list[Message],
        *,
        json: bool = False,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        try:
            reply = await ask_for_json(self.chat, messages, schema, max_tokens)
        except LLMTruncatedError:
            self.answered.set()
            raise
        self.answered.set()
        return reply


async def _run_all(
    chat: ChatModel,
    passages: Iterator[Passage],
    window: int,
    deliver: _Delivery,
    should_stop: Callable[[], bool] | None,
    finished: threading.Event,
) -> None:
    """Keep `window` passages in flight (one until the first reply: a wrong URL, key or model then costs one
    request, not a window of them); deliver each outcome as it completes."""
    todo = passages  # an iterator may claim its items as they are asked for (engram.extract.claims.ClaimFeed)
    watched = _Watched(chat)
    running: set[asyncio.Future[Any]] = set()
    try:
        while True:
            limit = window if watched.answered.is_set() else 1
            while len(running) < limit and not (should_stop is not None and should_stop()):
                item = next(todo, None)
                if item is None:
                    break
                running.add(asyncio.ensure_future(_one(watched, *item)))
            if not running:
                return
            probe: asyncio.Future[Any] | None = None
            if not watched.answered.is_set():
                probe = asyncio.ensure_future(watched.answered.wait())
                running.add(probe)
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            if probe is not None:
                probe.cancel()
                done.discard(probe)
                running.discard(probe)
                watched.answered.set()  # a reply arrived, or a passage ended: either way the probe is over
            _deliver_done(done, deliver)
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        deliver(None)
        finished.set()


def _deliver_done(done: set[asyncio.Future[Any]], deliver: _Delivery) -> None:
    """Deliver the finished passages' outcomes, then raise the first fatal error among them, if any."""
    fatal = [task.exception() for task in done if task.exception() is not None]
    for task in done:
        if task.exception() is None:
            deliver(task.result())
    if fatal:
        raise fatal[0]  # type: ignore[misc]


async def _one(chat: ChatModel, pid: str, text: str, title: str | None) -> tuple[str, ExtractionOutcome]:
    return pid, await aextract_passage(chat, text, title)
