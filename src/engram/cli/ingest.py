"""`engram index`, `engram extract`, `engram delete` and `engram sync`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from engram.cli.common import Bars, add_common, command, memory_line, open_memory, report_index, say
from engram.cli.llm_args import add_run_args, memory_for_estimate, print_estimate, report_llm
from engram.errors import InputError

if TYPE_CHECKING:
    from engram.memory import Memory

STRICT_EXIT = 3  # --strict: passages failed extraction


def report_failures(memory: Memory, strict: bool, extracted: int = 0, failed: int = 0) -> int:
    """Say how many stored passages failed extraction and why (commonest reasons first); the exit code:
    STRICT_EXIT with --strict when any failed, and always when every passage this run tried (`extracted` +
    `failed`) failed: such a run did nothing it was asked to, and a script must not read it as success."""
    reasons = memory.extraction_failures()
    total = sum(reasons.values())
    if not total:
        return 0
    say(f"{total} passages failed extraction; commonest reasons:")
    for reason, count in list(reasons.items())[:3]:
        say(f"  {count} x {reason[:200]}")
    say("the next `engram index`, `engram sync` or `engram extract` with an LLM retries them")
    if failed and not extracted:
        say(f"every passage this run tried ({failed}) failed extraction: check the LLM settings and the reasons above")
        return STRICT_EXIT
    return STRICT_EXIT if strict else 0


def cmd_index(args: argparse.Namespace) -> int:
    from engram.ingest.sources import collect

    collected = collect(args.paths)
    for path, reason in collected.skipped.items():
        say(f"skipped {path}: {reason}")
    if collected.skipped and not collected.documents:
        raise InputError("nothing to index: every file given was skipped (the reasons are above)")
    if args.dry_run:
        with memory_for_estimate(args) as memory:
            estimate = memory.estimate(
                collected.documents, extractions=args.extractions, max_input_tokens=args.max_input_tokens
            )
            print_estimate(estimate, memory.llm)
        return 0
    bars = Bars(args.progress)
    with open_memory(args, create=True) as memory:
        try:
            report = memory.index(
                collected.documents,
                extractions=args.extractions,
                progress=bars,
                max_tokens=args.max_tokens,
                max_input_tokens=args.max_input_tokens,
            )
        finally:
            bars.close()
        for label, ids in (("added", report.added), ("updated", report.updated)):
            for doc_id in ids:
                print(f"{label:<8} {doc_id}")
        report_index(report)
        report_llm(report)
        return report_failures(memory, args.strict, report.extracted, report.failed)


def cmd_extract(args: argparse.Namespace) -> int:
    if args.dry_run:
        with open_memory(args) as memory:
            print_estimate(memory.estimate(), memory.llm)
        return 0
    bars = Bars(args.progress)
    with open_memory(args, extractor="llm") as memory:  # `extract` runs the LLM, whoever built the memory
        try:
            report = memory.extract(progress=bars, max_tokens=args.max_tokens, redo=args.redo, lease=args.lease)
        finally:
            bars.close()
        report_index(report, "extracted")
        report_llm(report)
        return report_failures(memory, args.strict, report.extracted, report.failed)


def cmd_delete(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        report = memory.delete(args.ids)
    report_index(report, "deleted")
    return 1 if report.skipped else 0  # as rm: what could be removed is, and an unknown id is an error


def cmd_sync(args: argparse.Namespace) -> int:
    bars = Bars(args.progress)
    with open_memory(args, create=True) as memory:
        try:
            report = memory.sync(args.folder, progress=bars)
        finally:
            bars.close()
        for path, reason in report.skipped.items():
            say(f"skipped {path}: {reason}")
        for label, ids in (("added", report.added), ("updated", report.updated), ("deleted", report.deleted)):
            for doc_id in ids:
                print(f"{label:<8} {doc_id}")
        say(
            f"sync: {len(report.added)} added, {len(report.updated)} updated, {len(report.deleted)} deleted, "
            f"{report.unchanged} unchanged; {memory_line(memory.stats())}"
        )
        if report.extracted or report.failed:
            who = "spaCy (offline)" if memory.extractor == "spacy" else "the LLM"
            say(f"extractions: {report.extracted} by {who}, {report.failed} failed")
        return report_failures(memory, args.strict, report.extracted, report.failed)


def add_extractor(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--extractor",
        choices=["llm", "spacy"],
        help="who extracts passages without precomputed extractions: the LLM (default; pending without one) or "
        "spaCy offline (pip install 'engram[nlp]'); default $ENGRAM_EXTRACTOR or llm",
    )


def add_strict(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strict",
        action="store_true",
        help=f"exit with status {STRICT_EXIT} when passages failed extraction (for scripts); without it the exit "
        f"is {STRICT_EXIT} only when every passage the run tried failed",
    )


IDS = """Ids: a file of a folder gets `FOLDERNAME/PATH/IN/FOLDER` (notes/sub/a.md), a file given by itself its name,
a corpus row its own "id". Indexing again adds new documents and updates changed ones (same id)."""


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    index = command(
        sub,
        "index",
        "add documents (files, folders, .jsonl/.json corpora) and update changed ones",
        "Folders are read recursively: .txt, .md, .markdown, .rst, and with pip install 'engram[docs]' .html, .htm,\n"
        f".xhtml, .pdf (a document per page: ID#page=N) and .docx; other files are reported as skipped.\n{IDS}\n"
        "With an LLM, passages are extracted (failed ones from earlier runs retried); without, they stay pending.",
        """engram index notes/ --memory my.engram
engram index notes/ papers.jsonl --memory my.engram --extractions openie.jsonl
engram index notes/ --memory my.engram --dry-run          # LLM requests and tokens, nothing sent
engram index notes/ --memory my.engram --strict           # exit 3 when passages failed extraction""",
    )
    add_common(index)
    index.add_argument("paths", nargs="+", help="files or folders")
    index.add_argument("--extractions", help="precomputed extractions (JSONL or HippoRAG OpenIE JSON)")
    add_extractor(index)
    add_run_args(index, chunking=True)
    add_strict(index)
    index.set_defaults(func=cmd_index)
    extract = command(
        sub,
        "extract",
        "run the LLM on pending and failed passages",
        "Passages indexed without an LLM, or whose extraction failed, are extracted and linked into the graph.\n"
        "Run it in as many processes (and, on PostgreSQL, machines) as you like: each passage is leased to one\n"
        "of them, none is sent twice, and a killed process's passages go to the others once its lease lapses.",
        """engram extract --memory my.engram --llm-base-url http://localhost:8000/v1 --llm-model qwen
engram extract --memory my.engram --max-tokens 200000 --strict
engram extract --memory my.engram --llm-model bigger-model --redo other   # re-extract what another model made""",
    )
    add_common(extract)
    extract.add_argument(
        "--redo",
        choices=["other", "all"],
        help="also re-extract finished passages: 'other' those another extractor made (another model or prompt "
        "version, spaCy, an import), 'all' every passage, asking the LLM again instead of using cached replies",
    )
    extract.add_argument(
        "--lease",
        type=float,
        metavar="SECONDS",
        help="how long a claim on a passage lasts without renewal ($ENGRAM_EXTRACT_LEASE, 120): how long the "
        "other workers wait for the passages of one killed on another machine",
    )
    add_run_args(extract, chunking=False)
    add_strict(extract)
    extract.set_defaults(func=cmd_extract)
    delete = command(
        sub,
        "delete",
        "remove documents by id",
        "Removes the documents, their passages, and the facts and phrases no remaining passage states.\n"
        "Exits with 1 when an id is not in the memory (the others are removed).",
        """engram delete notes/old.md --memory my.engram
engram delete doc-1 doc-2 --memory my.engram""",
    )
    add_common(delete, llm=False, progress=False)
    delete.add_argument("ids", nargs="+", help="document ids (see `engram retrieve --json` or `engram index` output)")
    delete.set_defaults(func=cmd_delete)
    sync = command(
        sub,
        "sync",
        "make the memory mirror a folder (add, update, delete)",
        f"Like `engram index FOLDER`, and documents of that folder whose file is gone are deleted.\n{IDS}\n"
        "Documents from elsewhere are never touched. With an LLM, failed passages are retried.",
        """engram sync notes/ --memory my.engram
engram sync notes/ --memory my.engram --strict            # exit 3 when passages failed extraction""",
    )
    add_common(sync)
    sync.add_argument("folder", help="folder of text files and documents (as engram index reads them)")
    add_extractor(sync)
    add_strict(sync)
    sync.set_defaults(func=cmd_sync)
