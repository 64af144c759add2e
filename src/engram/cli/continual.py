"""`engram eval --continual N`: the paper's continual-learning experiment (library logic in
`engram.eval.continual`)."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from engram.cli.common import Bars, say
from engram.cli.eval_args import baseline, check_args, parse_methods, parse_weights, run_setup
from engram.errors import InputError
from engram.eval.continual import (
    Stage,
    continual_details,
    continual_result,
    continual_table,
    run_continual,
    split_segments,
)
from engram.eval.loaders import check_gold, load_dataset
from engram.eval.runner import RunOptions, entities_by_question, plan_methods
from engram.extract.importers import ExtractionSet, load_extractions
from engram.memory import Memory
from engram.settings import resolve_llm

RESULTS = "continual.json"
DETAILS = "details.jsonl"
REPORT = "continual.md"


def _continual_methods(args: argparse.Namespace) -> list[str]:
    """hipporag2 and dense always, then the --methods given."""
    return list(dict.fromkeys(["hipporag2", "dense", *parse_methods(args)]))


def _run(args: argparse.Namespace, folder: Path) -> tuple[dict[str, Any], list[Stage]]:
    methods = _continual_methods(args)
    data = load_dataset(args.questions, args.corpus, args.format)
    questions = data.questions[: args.limit] if args.limit else data.questions
    llm = resolve_llm(folder, args.llm_base_url, args.llm_model)
    check_args(args, methods, llm is not None)
    if llm is None:
        say("no LLM configured: the hipporag2 recognition filter is skipped")
    segments = split_segments(data.documents, questions, args.continual)
    evaluated = args.eval_segment - 1
    entities = None
    if args.query_entities:
        from engram.retrieve.query_ner import load_query_entities

        entities = entities_by_question(questions, load_query_entities(args.query_entities))
    extractions = load_extractions(args.extractions) if args.extractions else ExtractionSet()
    specs = plan_methods(methods, parse_weights(args.passage_weight), args.ircot_steps)
    against = baseline(args, [spec.name for spec in specs])
    check_gold(data, args.questions, needed=not args.qa)
    options = RunOptions(depth=args.top_k, qa=args.qa, query_entities=entities)
    bars = Bars(args.progress)

    def done(stage: Stage) -> None:
        bars.close()
        recall = ", ".join(f"{r.spec.name} R@5 {r.summary['recall'].get('5', 0.0):.3f}" for r in stage.results)
        say(
            f"stage {len(stage.segments)} (segments {'+'.join(map(str, stage.segments))}, "
            f"{stage.index['passages']} passages): {recall}"
        )

    with Memory(folder, embedder=args.embedder, llm=llm) as memory:
        if memory.stats()["documents"]:
            raise InputError(f"--continual builds its own memory: {folder} already holds documents")
        memory.embedder.embed(["warm-up"], role="query")  # load the model before any method is timed
        stages = run_continual(
            memory,
            segments,
            specs,
            evaluated=evaluated,
            extractions=extractions,
            options=options,
            progress=bars,
            on_stage=done,
        )
        setup = run_setup(args, data, memory, methods)
    result = continual_result(segments, stages, evaluated, against, args.bootstrap_samples)
    return {"setup": {**setup, "continual": args.continual}, **result}, stages


def cmd_continual(args: argparse.Namespace) -> int:
    if args.memory:
        result, stages = _run(args, Path(args.memory))
    else:
        with tempfile.TemporaryDirectory(prefix="engram-continual-") as tmp:
            result, stages = _run(args, Path(tmp) / "memory")
    table = continual_table(result)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / RESULTS).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        rows = continual_details(stages)
        (out / DETAILS).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        (out / REPORT).write_text(f"# Continual learning\n\n{table}\n", encoding="utf-8")
        say(f"wrote {out / RESULTS}, {out / DETAILS}, {out / REPORT}")
    if args.json:
        print(json.dumps(result))
        return 0
    sizes = ", ".join(f"{s['segment']}: {s['documents']} docs / {s['questions']} questions" for s in result["segments"])
    print(f"segments ({sizes}); evaluating segment {result['evaluated_segment']}\n")
    print(table)
    return 0
