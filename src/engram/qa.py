"""The reader: answer a question from retrieved passages, reasoning briefly before an "Answer:" line."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from engram.llm import aio
from engram.llm.base import ChatModel, Message, ask, concurrency_of
from engram.llm.failures import LLMTruncatedError
from engram.types import RetrievedPassage

READER_SYSTEM = (
    "You answer questions using the passages you are given. Think it through in a few short sentences, "
    "connecting facts across passages when the question needs more than one. Then end with a last line of "
    'the form "Answer: <answer>", where the answer is as short as possible: a name, a date, a number, a '
    "short phrase, or yes/no. If the passages do not settle it, give the most likely answer."
)

_EXAMPLE_PASSAGES = (
    "Passage 1:\nMarta Ellison\nMarta Ellison is a marine biologist who directs the Kelvik Research "
    "Station.\n\n"
    "Passage 2:\nKelvik Research Station\nThe Kelvik Research Station is a field laboratory on the coast "
    "of Iceland, founded in 1972."
)
_EXAMPLE_QUESTION = "In which country is the station directed by Marta Ellison?"
_EXAMPLE_REPLY = (
    "Marta Ellison directs the Kelvik Research Station. That station is on the coast of Iceland.\n"
    "Answer: Iceland"
)

# "Answer:" (or "answer is:") as a word, maybe with emphasis before the colon ("**Answer**:"); emphasis
# after the colon ("**Answer:**") is stripped from the answer text.
_ANSWER_LABEL = re.compile(r"(?<![a-z0-9])answer(?:\s+is)?(?:\*\*|__|\*|_)?\s*:", re.IGNORECASE)
_EDGE_MARKUP = "*_`#> \t"
_QUOTES = "\"'“”‘’«»`"


def format_passages(passages: Sequence[RetrievedPassage]) -> str:
    blocks = []
    for number, passage in enumerate(passages, 1):
        body = f"{passage.title}\n{passage.text}" if passage.title else passage.text
        blocks.append(f"Passage {number}:\n{body}")
    return "\n\n".join(blocks)


def build_reader_messages(query: str, passages: Sequence[RetrievedPassage]) -> list[Message]:
    context = format_passages(passages) if passages else "(no passages were found)"
    return [
        {"role": "system", "content": READER_SYSTEM},
        {"role": "user", "content": f"{_EXAMPLE_PASSAGES}\n\nQuestion: {_EXAMPLE_QUESTION}"},
        {"role": "assistant", "content": _EXAMPLE_REPLY},
        {"role": "user", "content": f"{context}\n\nQuestion: {query}"},
    ]


def _unwrap(text: str) -> str:
    """Strip whitespace, markdown emphasis and matching quotes from both ends, repeatedly."""
    previous = None
    while text != previous:
        previous = text
        text = text.strip().strip(_EDGE_MARKUP).strip()
        if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
            text = text[1:-1]
    return text


def _clean(answer: str) -> str:
    answer = _unwrap(answer)
    if answer.endswith(".") and not answer.endswith(".."):
        last_word = answer.split()[-1]
        if "." not in last_word[:-1]:  # keep abbreviations such as "U.S." or "D.C."
            answer = answer[:-1]
    return _unwrap(answer)


def extract_answer(raw: str) -> str:
    """The text after the last "Answer:" label (case-insensitive, markdown emphasis allowed), up to the end
    of its line, or the next non-empty line when the label ends its line; without a label, the last
    non-empty line. Surrounding quotes, emphasis and a final period are removed."""
    labels = list(_ANSWER_LABEL.finditer(raw))
    if labels:
        rest = raw[labels[-1].end() :]
        for line in rest.splitlines():
            if _clean(line):
                return _clean(line)
        return ""
    lines = [line for line in raw.splitlines() if _clean(line)]
    return _clean(lines[-1]) if lines else ""


def read(chat: ChatModel, query: str, passages: Sequence[RetrievedPassage]) -> tuple[str, str]:
    """Ask the reader; returns `(answer, raw reply)`. A reply cut off at the token limit is still read."""
    return read_all(chat, [(query, passages)])[0]


def read_all(
    chat: ChatModel, items: Sequence[tuple[str, Sequence[RetrievedPassage]]]
) -> list[tuple[str, str]]:
    """`read` for many questions, their calls concurrent (as many at once as the chat model takes)."""
    return aio.run(_read_all(chat, list(items)))


async def _read_all(chat: ChatModel, items: list[tuple[str, Sequence[RetrievedPassage]]]) -> list[tuple[str, str]]:
    slots = asyncio.Semaphore(concurrency_of(chat))

    async def one(query: str, passages: Sequence[RetrievedPassage]) -> tuple[str, str]:
        async with slots:
            try:
                raw = await ask(chat, build_reader_messages(query, passages))
            except LLMTruncatedError as error:
                raw = error.text
        return extract_answer(raw), raw

    return list(await asyncio.gather(*(one(q, p) for q, p in items)))
