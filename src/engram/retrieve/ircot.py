"""IRCoT: interleaved retrieval and chain-of-thought over any retrieval method.

Step 1 retrieves with the question. After each retrieval the LLM sees the passages gathered so far, the
question and its reasoning so far, and writes either the next sentence of reasoning or a final
"Answer: ..." line. An answer stops the loop; otherwise the new sentence becomes the next step's query,
until `steps` retrievals have run. The steps' rankings are merged: a passage's merged position is its best
rank in any step (ties go to the earlier step), and its merged score is 1 / that rank.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from engram.errors import LLM_HINT, InputError, LLMError
from engram.llm.base import ChatModel, Message
from engram.llm.failures import LLMTruncatedError
from engram.qa import extract_answer, format_passages
from engram.retrieve.context import RetrievalContext
from engram.retrieve.query_ner import QueryEntities
from engram.types import Fact, Retrieval, RetrievedPassage, Seed

IRCOT_SYSTEM = (
    "You work out the answer to a question one step at a time, using the passages you are given. Each turn, "
    "read the passages, the question and the reasoning so far, then write exactly one new sentence that "
    "states the next fact needed, taken from the passages (name the people, places and things involved). "
    'When the reasoning so far and the passages settle the question, write instead a single line "Answer: '
    '<answer>" with the answer as short as possible. Do not repeat a sentence already written.'
)

_EXAMPLE_PASSAGES = (
    "Passage 1:\nHarrow Quay Lighthouse\nHarrow Quay Lighthouse was designed by the engineer Oskar Lindqvist "
    "and first lit in 1911.\n\n"
    "Passage 2:\nOskar Lindqvist\nOskar Lindqvist (1870-1938) was a Swedish engineer born in Gävle."
)
_EXAMPLE_QUESTION = "In which town was the designer of Harrow Quay Lighthouse born?"
_EXAMPLE_STEPS = ("Harrow Quay Lighthouse was designed by Oskar Lindqvist.", "Answer: Gävle")

_ANSWER_LINE = re.compile(r"(?<![a-z0-9])answer(?:\s+is)?\W{0,3}:", re.IGNORECASE)


@dataclass(frozen=True)
class IRCoTResult:
    """The merged `retrieval` (method "ircot-<base method>"), the reader's `answer` (None when it did not
    answer within the steps), its `thoughts`, and the query of each retrieval step."""

    retrieval: Retrieval
    answer: str | None
    thoughts: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.queries)


def _turn(passages: str, question: str, thoughts: Sequence[str]) -> str:
    so_far = " ".join(thoughts) if thoughts else "(nothing yet)"
    return f"{passages}\n\nQuestion: {question}\nReasoning so far: {so_far}\nNext:"


def ircot_messages(question: str, passages: Sequence[RetrievedPassage], thoughts: Sequence[str]) -> list[Message]:
    context = format_passages(passages) if passages else "(no passages were found)"
    return [
        {"role": "system", "content": IRCOT_SYSTEM},
        {"role": "user", "content": _turn(_EXAMPLE_PASSAGES, _EXAMPLE_QUESTION, [])},
        {"role": "assistant", "content": _EXAMPLE_STEPS[0]},
        {"role": "user", "content": _turn(_EXAMPLE_PASSAGES, _EXAMPLE_QUESTION, _EXAMPLE_STEPS[:1])},
        {"role": "assistant", "content": _EXAMPLE_STEPS[1]},
        {"role": "user", "content": _turn(context, question, thoughts)},
    ]


def parse_step(reply: str) -> tuple[str | None, str]:
    """(answer, thought): the answer when the reply has an "Answer:" label, else None and the reply's first
    non-empty line as the next thought ("" when the reply is empty)."""
    if _ANSWER_LINE.search(reply):
        return extract_answer(reply), ""
    lines = [line.strip() for line in reply.splitlines() if line.strip()]
    return None, lines[0] if lines else ""


def merge_steps(steps: Sequence[Sequence[RetrievedPassage]], k: int) -> list[RetrievedPassage]:
    """Merge step rankings: order by best rank over the steps, then by the earliest step reaching it; each
    passage once, its score 1 / best rank (1-based)."""
    best: dict[str, tuple[int, int, RetrievedPassage]] = {}
    for step, ranking in enumerate(steps):
        for rank, passage in enumerate(ranking, start=1):
            seen = best.get(passage.id)
            if seen is None or (rank, step) < seen[:2]:
                best[passage.id] = (rank, step, passage)
    ordered = sorted(best.values(), key=lambda item: item[:2])[:k]
    return [
        RetrievedPassage(p.id, p.doc_id, p.title, p.text, 1.0 / rank, dict(p.metadata)) for rank, _, p in ordered
    ]


def _reason(chat: ChatModel, question: str, passages: Sequence[RetrievedPassage], thoughts: Sequence[str]) -> str:
    try:
        return chat.complete(ircot_messages(question, passages, thoughts))
    except LLMTruncatedError as error:
        return error.text


@dataclass
class _State:
    question: str
    rankings: list[list[RetrievedPassage]] = field(default_factory=list)
    retrievals: list[Retrieval] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    answer: str | None = None
    done: bool = False


def _result(state: _State, method: str, k: int, pending: int) -> IRCoTResult:
    facts: dict[tuple[str, str, str], Fact] = {}
    seeds: dict[str, Seed] = {}
    for r in state.retrievals:
        facts.update((f.triple, f) for f in r.facts if f.triple not in facts)
        seeds.update((s.phrase, s) for s in r.seeds if s.phrase not in seeds)
    merged = Retrieval(
        state.question,
        merge_steps(state.rankings, k),
        f"ircot-{method}",
        facts=list(facts.values()),
        seeds=list(seeds.values()),
        filtered=any(r.filtered for r in state.retrievals),
        pending=pending,
    )
    return IRCoTResult(merged, state.answer, list(state.thoughts), list(state.queries))


def ircot(
    ctx: RetrievalContext,
    queries: Sequence[str],
    top_k: int = 5,
    method: str = "hipporag2",
    steps: int = 2,
    *,
    llm: ChatModel | None = None,
    reader_passages: int = 10,
    query_entities: QueryEntities | None = None,
) -> list[IRCoTResult]:
    """Run IRCoT for each query over `method` (any retrieval method), with `llm` (default: the context's).
    Each step's retrieval is batched over the queries still reasoning."""
    from engram.retrieve.run import retrieve

    chat = llm or ctx.chat
    if chat is None:
        raise LLMError("IRCoT needs an LLM: " + LLM_HINT)
    if steps < 1:
        raise InputError("IRCoT needs at least one step")
    states = [_State(q) for q in queries]
    for _ in range(steps):
        active = [s for s in states if not s.done]
        if not active:
            break
        batch = [s.thoughts[-1] if s.thoughts else s.question for s in active]
        found = retrieve(ctx, batch, top_k, method, query_entities=query_entities)
        for state, query, retrieval in zip(active, batch, found):
            state.queries.append(query)
            state.retrievals.append(retrieval)
            state.rankings.append(retrieval.passages)
            context = merge_steps(state.rankings, reader_passages)
            answer, thought = parse_step(_reason(chat, state.question, context, state.thoughts))
            if answer is not None or not thought or thought in state.thoughts:
                state.answer, state.done = answer, True
            else:
                state.thoughts.append(thought)
    pending = ctx.view.pending
    return [_result(s, method, top_k, pending) for s in states]
