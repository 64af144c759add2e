"""Before spending anything: how many requests and input tokens an extraction run will take
(`engram index --dry-run`), and how long a passage may be so its prompts fit `--max-input-tokens`.

Both use `engram.tokens` (a tokenizer file when configured, else the documented offline estimate). The
second request of a passage lists the entities the first one found; before that reply exists, that list is
assumed to take `ENTITY_SHARE` of the passage's tokens. Requests whose replies are already in the memory's
response cache cost nothing and are counted apart; a retry after an unreadable reply is not foreseen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram.errors import ExtractionError, InputError
from engram.extract.openie import (
    ENTITY_SCHEMA,
    NER_REPLY_CAP,
    TRIPLE_SCHEMA,
    TRIPLES_REPLY_CAP,
    _read_entities,
    ner_messages,
    reply_cap,
    triple_messages,
)
from engram.llm.base import Message
from engram.llm.cache import CachedChat
from engram.llm.jsonparse import parse_json_object
from engram.store.records import PassageRow
from engram.tokens import TokenCount, default_counter, message_tokens

ENTITY_SHARE = 0.5
TITLE_ALLOWANCE = 32


@dataclass(frozen=True)
class ExtractionEstimate:
    """`passages` that need the LLM, the `calls` they will send and their `input_tokens`; `cached_calls`
    are requests the response cache will answer (no call, no tokens)."""

    passages: int = 0
    calls: int = 0
    input_tokens: int = 0
    cached_calls: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "passages": self.passages,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "cached_calls": self.cached_calls,
        }


def _passage_block(p: PassageRow) -> str:
    return f"{p.title}\n{p.text}" if p.title else p.text


def _cached(chat: CachedChat | None, messages: list[Message], schema: dict[str, Any], cap: int) -> str | None:
    if chat is None:
        return None
    return chat.store.cached_response(chat.key(messages, True, cap, schema))


def estimate_extraction(
    passages: Sequence[PassageRow], chat: CachedChat | None = None, count: TokenCount | None = None
) -> ExtractionEstimate:
    """The requests and input tokens that extracting `passages` (all of them: filter out finished ones
    first) will take. With `chat`, replies already in its cache are counted as `cached_calls`."""
    counter = count or default_counter()
    calls = tokens = cached_calls = 0
    for p in passages:
        ner = ner_messages(p.text, p.title)
        block = _passage_block(p)
        reply = _cached(chat, ner, ENTITY_SCHEMA, reply_cap(NER_REPLY_CAP, block))
        entities: list[str] | None = None
        if reply is None:
            calls += 1
            tokens += message_tokens(ner, counter)
        else:
            cached_calls += 1
            try:
                entities = _read_entities(parse_json_object(reply))
            except ExtractionError:
                entities = None
        if entities is None:
            calls += 1
            share = int(ENTITY_SHARE * counter(_passage_block(p)))
            tokens += message_tokens(triple_messages(p.text, [], p.title), counter) + share
            continue
        second = triple_messages(p.text, entities, p.title)
        if _cached(chat, second, TRIPLE_SCHEMA, reply_cap(TRIPLES_REPLY_CAP, block)) is None:
            calls += 1
            tokens += message_tokens(second, counter)
        else:
            cached_calls += 1
    return ExtractionEstimate(len(passages), calls, tokens, cached_calls)


def prompt_overhead(count: TokenCount | None = None) -> int:
    """Tokens of the longer extraction prompt (the triples one) around an empty passage and entity list."""
    return message_tokens(triple_messages("", [], None), count or default_counter())


def passage_token_budget(max_input_tokens: int, count: TokenCount | None = None) -> int:
    """The most tokens a chunk may have so that both extraction prompts fit `max_input_tokens`: what the
    prompt (plus `TITLE_ALLOWANCE` for the document title) leaves, shared between the chunk and its entity
    list."""
    overhead = prompt_overhead(count) + TITLE_ALLOWANCE
    budget = int((max_input_tokens - overhead) / (1 + ENTITY_SHARE))
    if budget < 16:
        raise InputError(
            f"--max-input-tokens {max_input_tokens} leaves no room for a passage: the extraction prompt alone "
            f"takes {overhead} tokens; allow at least {overhead + 24}"
        )
    return budget
