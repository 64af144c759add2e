"""Retrieval on documents this machine already has, with no LLM: the path a new user takes with `engram index`.

Five corpora, checked separately:
  manpages       several hundred man pages (the list in bench/data/own_docs_manpages_files.txt), rendered to
                 plain text with `man -l` (MANWIDTH=100, no hyphenation or justification, overstrikes removed)
  git-relnotes   git's release notes (/usr/share/doc/git/RelNotes/*.txt, gzipped ones unpacked)
  manpages-5     held out (written after the fusion of passage scores alone was chosen on the two above): 156
                 section-5 pages not in the first list (bench/data/own_docs_manpages_5_files.txt), rendered alike
  debian-changelogs  held out too: the Debian changelogs of the installed packages
                 (/usr/share/doc/PACKAGE/changelog.Debian.gz) of 2,000 to 12,000 characters, as PACKAGE.txt, each
                 text once (under the first package name that has it)
  python-packages    held out from fusion choices (assembled, with its questions, before anything was run on
                 it, when the four above had all been used to choose; bench/own_docs_fusions.py): the
                 description (the METADATA body, with its Name and Summary lines) of every Python
                 distribution installed in this interpreter's environment and its base Python, of 1,500 to
                 40,000 characters, as NAME.txt (engram itself left out, each text once); what is installed
                 varies by machine, and the gold checks say when a question's files differ
Each corpus is written as a folder of .txt files into the cache, then indexed as `engram index FOLDER` would
(engram.ingest.sources.collect, the default embedder, no LLM, no extractor unless --extractor spacy); the
memory is kept in the cache and reused (indexing again only adds what changed).

Questions: bench/data/own_docs_<corpus>.jsonl, rows {"id", "kind", "question", "gold", "check"}; "gold" are the
file names (relative to the corpus folder) that answer the question, each checked with the grep in "check"
before any retrieval was run. A question is a hit at k when a gold file is the document of one of the first k
retrieved passages (top-1, top-5: passages, so several may come from one file); "files@5" counts a hit when a
gold file is among the first 5 distinct files of the first 30 passages. The per-question table and a summary go
to --out. Exits 2 when a corpus's documents are absent (nothing measured for it).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/own_docs.py
        [--corpus manpages|git-relnotes|manpages-5|debian-changelogs|python-packages|both|all]
        [--methods hipporag2,dense,bm25] [--extractor spacy] [--cache ~/.cache/engram-bench/own_docs] [--out DIR]
        [--fusion significance|weighted]

--fusion sets RetrieveConfig.fusion, how a ranking by passage scores alone (`hybrid`, and the default here,
where no passage has facts) fuses cosines and BM25; without it, the library's default.
"""

from __future__ import annotations

import argparse
import email.parser
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engram import Memory
from engram.config import FUSIONS
from engram.ingest.sources import collect

DATA = Path(__file__).resolve().parent / "data"
MAN_ROOT = Path("/usr/share/man")
RELNOTES = Path("/usr/share/doc/git/RelNotes")
DOC_ROOT = Path("/usr/share/doc")
CORPORA = ("manpages", "git-relnotes", "manpages-5", "debian-changelogs", "python-packages")
MAN_LISTS = {"manpages": "own_docs_manpages_files.txt", "manpages-5": "own_docs_manpages_5_files.txt"}
CHANGELOG_SIZE = (2000, 12000)  # characters of a Debian changelog kept in debian-changelogs
DESCRIPTION_SIZE = (1500, 40000)  # characters of a distribution's description kept in python-packages
WIDE = 30  # passages asked for when counting distinct files
OVERSTRIKE = re.compile(r".\x08")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "engram-bench" / "own_docs"


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    question: str
    gold: tuple[str, ...]
    check: str = ""


def load_questions(path: Path) -> list[Question]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [Question(r["id"], r.get("kind", ""), r["question"], tuple(r["gold"]), r.get("check", "")) for r in rows]


def check_gold(questions: list[Question], folder: Path) -> list[str]:
    """Re-run each question's grep (its "check", up to a `  #` comment) in the corpus folder: the files it finds
    must be the gold ones, apart from those its comment names after "excluded:". The questions whose check
    does not hold on this machine's documents, with what was found."""
    bad = []
    for q in questions:
        command, _, comment = q.check.partition("  #")
        excluded = set(comment.split("excluded:")[1].split(":")[0].split()) if "excluded:" in comment else set()
        done = subprocess.run(command, shell=True, cwd=folder, capture_output=True, text=True, check=False)
        found = {word for word in done.stdout.split() if word.endswith(".txt")}
        if not set(q.gold) <= found or found - set(q.gold) - excluded:
            bad.append(f"{q.id}: gold {sorted(q.gold)}, the check finds {sorted(found)}")
    return bad


def manpage_list(listing: str = MAN_LISTS["manpages"]) -> list[str]:
    lines = (DATA / listing).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def rendered_name(relative: str) -> str:
    """man1/ls.1.gz -> ls.1.txt"""
    name = Path(relative).name
    return (name[:-3] if name.endswith(".gz") else name) + ".txt"


def render_manpage(source: Path) -> str:
    """The page as plain text, the same on every run: fixed width, C.UTF-8, no hyphenation or justification,
    no pager, bold/underline overstrikes and escapes removed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAN", "LC_", "GROFF"))}
    env.update(MANWIDTH="100", LC_ALL="C.UTF-8", MANPAGER="cat", PAGER="cat")
    done = subprocess.run(["man", "--nh", "--nj", "-l", str(source)], env=env, capture_output=True, check=False)
    text = done.stdout.decode("utf-8", errors="replace")
    return ANSI.sub("", OVERSTRIKE.sub("", text))


def write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def build_manpages(folder: Path, listing: str = MAN_LISTS["manpages"]) -> tuple[int, list[str]]:
    """Render the pages of `listing` into `folder` (a page already rendered is kept); (pages written, missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    missing: list[str] = []
    count = 0
    for relative in manpage_list(listing):
        source = MAN_ROOT / relative
        target = folder / rendered_name(relative)
        if not source.is_file():
            missing.append(relative)
            target.unlink(missing_ok=True)
            continue
        if not target.exists():
            text = render_manpage(source)
            if not text.strip():
                missing.append(relative)
                continue
            write_if_changed(target, text)
        count += 1
    return count, missing


def build_relnotes(folder: Path) -> tuple[int, list[str]]:
    """Copy git's release notes into `folder` as NAME.txt (gzipped ones unpacked)."""
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    for source in sorted(RELNOTES.iterdir()):
        if source.name.endswith(".txt.gz"):
            text = gzip.decompress(source.read_bytes()).decode("utf-8", errors="replace")
            name = source.name[:-3]
        elif source.name.endswith(".txt"):
            text = source.read_text(encoding="utf-8", errors="replace")
            name = source.name
        else:
            continue
        write_if_changed(folder / name, text)
        count += 1
    return count, []


def build_changelogs(folder: Path) -> tuple[int, list[str]]:
    """Unpack each installed package's Debian changelog of CHANGELOG_SIZE characters into `folder` as
    PACKAGE.txt, a text shared by several packages once, under the first of their names."""
    folder.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    count = 0
    for source in sorted(DOC_ROOT.glob("*/changelog.Debian.gz"), key=lambda path: path.parent.name):
        try:
            text = gzip.decompress(source.read_bytes()).decode("utf-8", errors="replace")
        except (OSError, EOFError):
            continue
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if not CHANGELOG_SIZE[0] <= len(text) <= CHANGELOG_SIZE[1] or digest in seen:
            continue
        seen.add(digest)
        write_if_changed(folder / f"{source.parent.name}.txt", text)
        count += 1
    return count, []


def site_packages() -> list[Path]:
    """This interpreter's site-packages and, for a virtual environment, its base Python's."""
    places = []
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix]):
        place = Path(sysconfig.get_path("purelib", vars={"base": prefix, "platbase": prefix}))
        if place.is_dir():
            places.append(place)
    return places


def build_descriptions(folder: Path) -> tuple[int, list[str]]:
    """Write each installed distribution's description of DESCRIPTION_SIZE characters into `folder` as
    NAME.txt (NAME lower-cased with - for _): its Name and Summary lines, a blank line, the METADATA body. A
    distribution found twice (in the environment and its base) is taken from the first place; a text shared
    by two names, once."""
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, str] = {}
    for place in site_packages():
        for source in sorted(place.glob("*.dist-info/METADATA")):
            message = email.parser.Parser().parsestr(source.read_text(encoding="utf-8", errors="replace"))
            name = (message.get("Name") or "").strip()
            key = name.lower().replace("_", "-")
            body = message.get_payload()
            if not key or key in found or key == "engram" or not isinstance(body, str):
                continue
            found[key] = f"{name}\n{message.get('Summary', '')}\n\n{body}"
    seen: set[str] = set()
    count = 0
    for key, text in sorted(found.items()):
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if not DESCRIPTION_SIZE[0] <= len(text) - len(text.split("\n\n", 1)[0]) - 2 <= DESCRIPTION_SIZE[1]:
            continue
        if digest in seen:
            continue
        seen.add(digest)
        write_if_changed(folder / f"{key}.txt", text)
        count += 1
    return count, []


def corpus_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.txt")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def first_rank(files: list[str], gold: set[str]) -> int | None:
    return next((i + 1 for i, f in enumerate(files) if f in gold), None)


def distinct(files: list[str]) -> list[str]:
    return list(dict.fromkeys(files))


def evaluate(memory: Memory, questions: list[Question], method: str, prefix: str,
             fusion: str | None = None) -> list[dict[str, Any]]:
    """Per question: the file of each of the first 5 passages, the first passage rank of a gold file, and the
    first rank of a gold file among distinct files (over WIDE passages). `fusion`: RetrieveConfig.fusion."""
    texts = [q.question for q in questions]
    config = replace(memory.config.retrieve, fusion=fusion) if fusion else None

    def files_of(retrieval: Any) -> list[str]:
        return [p.doc_id.removeprefix(prefix) for p in retrieval.passages]

    top = memory.retrieve(texts, top_k=5, method=method, config=config)
    wide = memory.retrieve(texts, top_k=WIDE, method=method, config=config)
    rows = []
    for q, narrow_r, wide_r in zip(questions, top, wide):
        gold = set(q.gold)
        top5 = files_of(narrow_r)
        files = distinct(files_of(wide_r))
        rows.append({
            "id": q.id, "method": method, "ranked_by": narrow_r.method, "passage_rank": first_rank(top5, gold),
            "file_rank": first_rank(files, gold), "top5_files": top5,
        })
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    n = len(rows)
    def share(test: Any) -> float:
        return sum(1 for r in rows if test(r)) / n if n else 0.0
    return {
        "top1": share(lambda r: r["passage_rank"] == 1),
        "top5": share(lambda r: r["passage_rank"] is not None),
        "files5": share(lambda r: r["file_rank"] is not None and r["file_rank"] <= 5),
    }


def run_corpus(name: str, args: argparse.Namespace) -> int:
    questions_path = DATA / f"own_docs_{name.replace('-', '_')}.jsonl"
    questions = load_questions(questions_path) if questions_path.exists() or not args.prepare_only else []
    folder = args.cache / name
    if name in MAN_LISTS:
        if not MAN_ROOT.is_dir() or not any((MAN_ROOT / "man1").glob("*")):
            print(f"[{name}] no man pages under {MAN_ROOT}: skipped", file=sys.stderr)
            return 2
        start = time.perf_counter()
        count, missing = build_manpages(folder, MAN_LISTS[name])
    elif name == "python-packages":
        start = time.perf_counter()
        count, missing = build_descriptions(folder)
    elif name == "debian-changelogs":
        if not any(DOC_ROOT.glob("*/changelog.Debian.gz")):
            print(f"[{name}] no Debian changelogs under {DOC_ROOT}: skipped", file=sys.stderr)
            return 2
        start = time.perf_counter()
        count, missing = build_changelogs(folder)
    else:
        if not RELNOTES.is_dir():
            print(f"[{name}] no {RELNOTES} (is git's documentation installed?): skipped", file=sys.stderr)
            return 2
        start = time.perf_counter()
        count, missing = build_relnotes(folder)
    present = {p.name for p in folder.glob("*.txt")}
    absent_gold = sorted({g for q in questions for g in q.gold} - present)
    if absent_gold:
        print(f"[{name}] gold files absent from this machine's docs: {', '.join(absent_gold[:10])}: skipped",
              file=sys.stderr)
        return 2
    print(f"\n[{name}] {count} files in {folder} (corpus sha256 {corpus_digest(folder)}; "
          f"{len(missing)} listed pages missing here{': ' + ', '.join(missing[:5]) if missing else ''}) "
          f"in {time.perf_counter() - start:.1f} s")
    bad = check_gold(questions, folder)
    print(f"[{name}] gold checks: {len(questions) - len(bad)} of {len(questions)} questions' greps find exactly "
          "their gold files here")
    for line in bad:
        print(f"  differs: {line}")
    if args.prepare_only:
        return 0

    suffix = f"-{args.extractor}" if args.extractor else ""  # without the flag: the library's default extractor
    memory_path = args.cache / f"{name}{suffix}.engram"
    collected = collect([str(folder)])
    for path, reason in collected.skipped.items():
        print(f"  skipped {path}: {reason}")
    prefix = f"{folder.name}/"
    with Memory(memory_path, embedder=args.embedder, llm=False, extractor=args.extractor) as memory:
        start = time.perf_counter()
        report = memory.index(collected.documents)
        stats = memory.stats()
        print(f"[{name}] indexed into {memory_path} in {time.perf_counter() - start:.1f} s "
              f"({len(report.added)} added, {len(report.updated)} updated; extractor {memory.extractor}, no LLM): "
              f"{stats['documents']} documents, {stats['passages']} passages, {stats.get('facts', 0)} facts, "
              f"{stats.get('phrases', 0)} phrases")
        kinds = Counter(q.kind for q in questions)
        fusion = args.fusion or memory.config.retrieve.fusion
        print(f"[{name}] fusion of passage scores alone: {fusion}")
        print(f"[{name}] {len(questions)} questions ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
        table: dict[str, dict[str, dict[str, Any]]] = {}
        summary: dict[str, Any] = {}
        print(f"{'method':<12} {'top-1':>6} {'top-5':>6} {'files@5':>8}   ranked by")
        for method in args.methods:
            start = time.perf_counter()
            rows = evaluate(memory, questions, method, prefix, args.fusion)
            took = time.perf_counter() - start
            s = summarise(rows)
            by = Counter(r["ranked_by"] for r in rows)
            summary[method] = {**s, "ranked_by": dict(by), "seconds": took}
            print(f"{method:<12} {s['top1']:6.3f} {s['top5']:6.3f} {s['files5']:8.3f}   "
                  f"{', '.join(f'{k} x{v}' for k, v in by.most_common())}")
            for r in rows:
                table.setdefault(r["id"], {})[method] = r
            for kind in sorted(kinds):
                part = [r for r, q in zip(rows, questions) if q.kind == kind]
                k = summarise(part)
                print(f"  {kind:<10} {k['top1']:6.3f} {k['top5']:6.3f} {k['files5']:8.3f}   ({len(part)} questions)")
    named = suffix + (f"-{args.fusion}" if args.fusion else "")  # the memory is shared; the tables are not
    write_outputs(args.out, name, named, questions, args.methods, table, summary, {**stats, "fusion": fusion})
    return 0


def write_outputs(out: Path, name: str, suffix: str, questions: list[Question], methods: list[str],
                  table: dict[str, dict[str, dict[str, Any]]], summary: dict[str, Any], stats: dict[str, Any]) -> None:
    """A TSV with one row per question (each method's first gold passage rank within 5, first gold file rank
    within 30 passages, and its top passage's file) and a JSON summary."""
    out.mkdir(parents=True, exist_ok=True)
    header = ["id", "kind", "question", "gold"]
    for m in methods:
        header += [f"{m}:passage_rank", f"{m}:file_rank", f"{m}:top1_file"]
    lines = ["\t".join(header)]
    for q in questions:
        cells = [q.id, q.kind, q.question, " ".join(q.gold)]
        for m in methods:
            r = table[q.id][m]
            cells += [str(r["passage_rank"] or "-"), str(r["file_rank"] or "-"),
                      r["top5_files"][0] if r["top5_files"] else ""]
        lines.append("\t".join(cells))
    (out / f"{name}{suffix}-questions.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / f"{name}{suffix}-summary.json").write_text(
        json.dumps({"corpus": name, "stats": stats, "methods": summary}, indent=2, default=str) + "\n",
        encoding="utf-8")
    print(f"[{name}] per-question table: {out / f'{name}{suffix}-questions.tsv'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=[*CORPORA, "both", "all"], default="both",
                        help="both: manpages and git-relnotes; all: the five")
    parser.add_argument("--methods", default="hipporag2,dense,bm25", help="comma-separated retrieval methods")
    parser.add_argument("--extractor", choices=["spacy"], default=None,
                        help="build the graph with the offline spaCy extractor (default: none, passages pending)")
    parser.add_argument("--embedder", default=None, help="default: the library's (all-MiniLM-L6-v2)")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="corpus folders and memories")
    parser.add_argument("--out", type=Path, default=None, help="per-question tables (default: CACHE/results)")
    parser.add_argument("--fusion", choices=FUSIONS, default=None,
                        help="how passage scores alone are fused (RetrieveConfig.fusion; default: the library's)")
    parser.add_argument("--prepare-only", action="store_true", help="write the corpus folders, index nothing")
    args = parser.parse_args()
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    args.out = args.out or args.cache / "results"
    names = {"both": CORPORA[:2], "all": CORPORA}.get(args.corpus, (args.corpus,))
    codes = [run_corpus(name, args) for name in names]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
