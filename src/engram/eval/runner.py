"""The evaluation runner behind `engram eval`: retrieve with each method (and its variants: passage-weight
sweeps, IRCoT), measure recall, answers and per-hop breakdowns, and compare methods with a paired
bootstrap. Library code: it returns results and never prints."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engram.eval.data import Question
from engram.eval.metrics import all_recall_at_k, exact_match, group_means, mean, recall_at_k, token_f1
from engram.eval.stats import paired_bootstrap
from engram.memory import Memory
from engram.types import Retrieval

KS = (1, 2, 5, 10, 20)
ALL_KS = (2, 5, 10, 20)
# methods whose graph search seeds passage nodes, so --passage-weight changes them
PASSAGE_WEIGHT_METHODS = frozenset(
    {"hipporag2", "hipporag2-paper", "hipporag2-ner-to-node", "hipporag2-query-to-node", "hipporag2-no-filter"}
)


@dataclass(frozen=True)
class MethodSpec:
    """One row of the results: `method` retrieves, optionally with another `passage_weight`, optionally
    wrapped in IRCoT with `ircot_steps` steps. `name` labels the row."""

    name: str
    method: str
    passage_weight: float | None = None
    ircot_steps: int = 0


@dataclass
class MethodResult:
    spec: MethodSpec
    summary: dict[str, Any]
    details: list[dict[str, Any]]
    # metric name ("recall@5", "all@5", "em", "f1") -> one value per question, for the bootstrap
    scores: dict[str, list[float]] = field(default_factory=dict)
    retrievals: list[Retrieval] = field(default_factory=list)


def plan_methods(
    methods: Sequence[str], passage_weights: Sequence[float] = (), ircot_steps: int = 0
) -> list[MethodSpec]:
    """The rows to run: each method once, or once per passage weight when it uses one (named
    "hipporag2@pw=0.01"); with `ircot_steps`, also each of those under IRCoT (named "ircot-<row>")."""
    specs: list[MethodSpec] = []
    for method in methods:
        if passage_weights and method in PASSAGE_WEIGHT_METHODS:
            specs += [MethodSpec(f"{method}@pw={w:g}", method, float(w)) for w in passage_weights]
        else:
            specs.append(MethodSpec(method, method))
    if ircot_steps:
        specs += [replace(s, name=f"ircot-{s.name}", ircot_steps=ircot_steps) for s in list(specs)]
    return specs


def ranked_documents(retrieval: Retrieval) -> list[str]:
    """Document ids in rank order (a chunked document counts once, at its best chunk)."""
    seen: list[str] = []
    for p in retrieval.passages:
        if p.doc_id not in seen:
            seen.append(p.doc_id)
    return seen


def entities_by_question(questions: Sequence[Question], given: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """A query-entities file may be keyed by question id or text; key it by question text."""
    out: dict[str, list[str]] = {}
    for q in questions:
        found = given.get(q.id, given.get(q.question))
        if found is not None:
            out[q.question] = list(found)
    return out


@dataclass(frozen=True)
class RunOptions:
    depth: int = 20
    qa: bool = False
    reader_passages: int = 5
    query_entities: Mapping[str, Sequence[str]] | None = None


def _retrieve(
    memory: Memory, questions: Sequence[Question], spec: MethodSpec, options: RunOptions
) -> tuple[list[Retrieval], list[dict[str, Any]]]:
    """Retrievals (2 x depth passages, so chunked documents still fill the depth) and per-question extras."""
    from engram.retrieve.ircot import ircot

    config = memory.config.retrieve
    if spec.passage_weight is not None:  # the default method's passage seeds are its prior (see config.py)
        if spec.method == "hipporag2":
            config = replace(config, prior_weight=spec.passage_weight)
        else:
            config = replace(config, passage_weight=spec.passage_weight)
    texts = [q.question for q in questions]
    k = options.depth * 2
    if not spec.ircot_steps:
        found = memory.retrieve(texts, k, spec.method, config=config, query_entities=options.query_entities)
        return found, [{} for _ in found]
    ctx = memory.context(config)
    results = ircot(ctx, texts, k, spec.method, spec.ircot_steps, query_entities=options.query_entities)
    extras = [{"answer": r.answer, "thoughts": r.thoughts, "queries": r.queries} for r in results]
    return [r.retrieval for r in results], extras


def _answers(memory: Memory, retrievals: Sequence[Retrieval], extras: list[dict[str, Any]], n: int) -> None:
    """Fill in missing answers with the reader over the top `n` passages."""
    from engram.qa import read

    assert memory.llm is not None
    for retrieval, extra in zip(retrievals, extras):
        if extra.get("answer") is None:
            extra["answer"] = read(memory.llm, retrieval.query, retrieval.passages[:n])[0]


def run_method(
    memory: Memory, questions: Sequence[Question], spec: MethodSpec, options: RunOptions | None = None
) -> MethodResult:
    options = options or RunOptions()
    start = time.perf_counter()
    retrievals, extras = _retrieve(memory, questions, spec, options)
    if options.qa:
        _answers(memory, retrievals, extras, options.reader_passages)
    seconds = time.perf_counter() - start
    ranked = [ranked_documents(r)[: options.depth] for r in retrievals]
    ks = [k for k in KS if k <= options.depth]
    scores = {f"recall@{k}": [recall_at_k(d, q.gold, k) for d, q in zip(ranked, questions)] for k in ks}
    scores.update(
        {f"all@{k}": [all_recall_at_k(d, q.gold, k) for d, q in zip(ranked, questions)] for k in ALL_KS if k in ks}
    )
    answered = [(i, e["answer"]) for i, e in enumerate(extras) if e.get("answer") is not None]
    if answered:
        scores["em"] = [exact_match(a, questions[i].answers) for i, a in answered]
        scores["f1"] = [token_f1(a, questions[i].answers) for i, a in answered]
    summary = _summary(spec, questions, retrievals, scores, seconds, len(answered))
    details = [
        _detail(spec, q, r, d, extras[i], scores, i) for i, (q, r, d) in enumerate(zip(questions, retrievals, ranked))
    ]
    return MethodResult(spec, summary, details, scores, list(retrievals))


def _summary(
    spec: MethodSpec,
    questions: Sequence[Question],
    retrievals: Sequence[Retrieval],
    scores: Mapping[str, list[float]],
    seconds: float,
    answered: int,
) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "recall": {name.split("@")[1]: round(mean(v), 4) for name, v in scores.items() if name.startswith("recall@")},
        "all_recall": {name.split("@")[1]: round(mean(v), 4) for name, v in scores.items() if name.startswith("all@")},
        "seconds_per_query": round(seconds / max(len(questions), 1), 5),
        "questions": len(questions),
        "method": spec.method,
    }
    if spec.passage_weight is not None:
        summary["passage_weight"] = spec.passage_weight
    if spec.ircot_steps:
        summary["ircot_steps"] = spec.ircot_steps
    if answered:
        summary.update(em=round(mean(scores["em"]), 4), f1=round(mean(scores["f1"]), 4), answered=answered)
    expected = f"ircot-{spec.method}" if spec.ircot_steps else spec.method
    fallbacks = sum(1 for r in retrievals if r.method != expected)
    if fallbacks:
        summary["dense_fallbacks"] = fallbacks
    summary["per_hop"] = _per_hop(questions, scores)
    return summary


def _per_hop(questions: Sequence[Question], scores: Mapping[str, list[float]]) -> dict[str, Any]:
    hops = [q.hops for q in questions]
    out: dict[str, Any] = {}
    for name, values in scores.items():
        if not name.startswith(("recall@", "all@")):
            continue
        kind, k = name.split("@")
        for hop, (count, value) in group_means(values, hops).items():
            row = out.setdefault(hop, {"questions": count, "recall": {}, "all_recall": {}})
            row["recall" if kind == "recall" else "all_recall"][k] = round(value, 4)
    return out


def _detail(
    spec: MethodSpec,
    q: Question,
    r: Retrieval,
    ranked: list[str],
    extra: dict[str, Any],
    scores: Mapping[str, list[float]],
    i: int,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "method": spec.name,
        "id": q.id,
        "question": q.question,
        "hops": q.hops,
        "gold": q.gold,
        "retrieved": ranked,
        "recall": {name.split("@")[1]: v[i] for name, v in scores.items() if name.startswith("recall@")},
        "ranked_by": r.method,
        "facts": [[*f.triple, round(f.score, 5)] for f in r.facts],
        "seeds": [[s.phrase, round(s.weight, 6)] for s in r.seeds],
    }
    if extra.get("answer") is not None:
        row.update(answer=extra["answer"], gold_answers=q.answers)
        row.update(em=exact_match(extra["answer"], q.answers), f1=round(token_f1(extra["answer"], q.answers), 4))
    row.update({k: v for k, v in extra.items() if k in ("thoughts", "queries")})
    return row


def compare(
    results: Sequence[MethodResult],
    baseline: str = "dense",
    metrics: Sequence[str] = ("recall@2", "recall@5"),
    samples: int = 10_000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Paired bootstrap of every row against the `baseline` row on each metric both have."""
    base = next((r for r in results if r.spec.name == baseline), None)
    if base is None:
        return []
    out = []
    for result in results:
        if result is base:
            continue
        for metric in metrics:
            a, b = result.scores.get(metric), base.scores.get(metric)
            if a is None or b is None or len(a) != len(b):
                continue
            test = paired_bootstrap(a, b, samples, seed)
            out.append(
                {
                    "a": result.spec.name,
                    "b": baseline,
                    "metric": metric,
                    "delta": round(test.delta, 4),
                    "ci": [round(test.ci_low, 4), round(test.ci_high, 4)],
                    "p_value": round(test.p_value, 4),
                    "p_greater": round(test.p_greater, 4),
                    "samples": samples,
                    "questions": test.n,
                }
            )
    return out


def score_method(
    memory: Memory, questions: Sequence[Question], method: str, ks: Sequence[int] = KS
) -> tuple[dict[str, Any], list[Retrieval]]:
    """One method's summary and retrievals (kept for callers of the first runner)."""
    result = run_method(memory, questions, MethodSpec(method, method), RunOptions(depth=max(ks)))
    return result.summary, result.retrievals
