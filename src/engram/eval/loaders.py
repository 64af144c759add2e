"""Dataset loaders for `engram eval`: our JSONL, the HippoRAG release format, and the raw MuSiQue,
2WikiMultihopQA and HotpotQA files.

* `engram`: JSONL questions `{id, question, answers, gold: [passage ids], hops}` and a JSONL corpus
  `{id, title, text}` (required).
* `hipporag` (the HippoRAG release): a JSON list of questions `{id, question, answer, paragraphs: [{title,
  text, is_supporting}]}`, and optionally `corpus.json`, a list of `{title, text}`.
* `musique` (raw): JSONL `{id, question, answer, answer_aliases, paragraphs: [{title, paragraph_text,
  is_supporting}]}`.
* `2wiki`, `hotpotqa` (raw): a JSON list `{_id, question, answer, type, context: [[title, [sentences]]],
  supporting_facts: [[title, sentence index]]}` (HotpotQA rows also have `level`).

Gold passages of a question are its supporting paragraphs, found in the corpus by title and text (whitespace
normalised), or by title alone when only one corpus passage has that title. Without a corpus file, the
corpus is every distinct (title, text) paragraph of the questions, in order of first appearance, with ids
`p00000`, `p00001`, ...; a HippoRAG `corpus.json` gets ids `<name>-00000`, ... (name: the file stem without
`_corpus`). Hops: the MuSiQue id prefix ("2hop", "3hop1", ...) or the question `type` (2Wiki, HotpotQA).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.errors import InputError
from engram.eval.data import Question, load_corpus, load_questions, read_jsonl
from engram.types import Document

FORMATS = ("auto", "engram", "hipporag", "musique", "2wiki", "hotpotqa")


@dataclass
class Dataset:
    documents: list[Document]
    questions: list[Question]
    format: str
    # supporting paragraphs that matched no corpus passage (counted, then left out of the gold)
    unmatched_gold: int = 0


@dataclass
class _Paragraph:
    title: str
    text: str
    supporting: bool


@dataclass
class _RawQuestion:
    id: str
    question: str
    answers: list[str]
    hops: str | None
    paragraphs: list[_Paragraph] = field(default_factory=list)


def _read_any(path: Path) -> list[dict[str, Any]]:
    """A JSON list (or one object) or JSONL rows."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return read_jsonl(path)
    except RecursionError as exc:
        raise InputError(f"cannot read {path}: JSON nested too deeply") from exc
    rows = data if isinstance(data, list) else [data]
    if not all(isinstance(r, dict) for r in rows):
        raise InputError(f"{path}: expected JSON objects")
    return rows


def detect_format(rows: Sequence[dict[str, Any]]) -> str:
    first = rows[0] if rows else {}
    if "gold" in first:
        return "engram"
    if "paragraphs" in first:
        paragraphs = first.get("paragraphs") or [{}]
        return "musique" if "paragraph_text" in paragraphs[0] else "hipporag"
    if "context" in first and "supporting_facts" in first:
        return "hotpotqa" if "level" in first else "2wiki"
    if "question" in first:
        return "engram"
    raise InputError("cannot tell the questions file's format: pass --format")


def _space(text: str) -> str:
    return " ".join(text.split())


def _answers(row: dict[str, Any]) -> list[str]:
    answer = row.get("answer", row.get("answers", []))
    out = [str(a) for a in answer] if isinstance(answer, list) else [str(answer)] if answer is not None else []
    out += [str(a) for a in row.get("answer_aliases", []) or []]
    return list(dict.fromkeys(a for a in out if a.strip()))


def _hops(row: dict[str, Any], question_id: str) -> str | None:
    if "__" in question_id:
        return question_id.split("__", 1)[0]
    kind = row.get("type")
    return str(kind) if kind else None


def _from_paragraphs(row: dict[str, Any], n: int) -> _RawQuestion:
    qid = str(row.get("id", row.get("_id", n)))
    paragraphs = [
        _Paragraph(
            str(p.get("title", "")),
            _space(str(p.get("paragraph_text", p.get("text", "")))),
            bool(p.get("is_supporting")),
        )
        for p in row.get("paragraphs", [])
    ]
    return _RawQuestion(qid, str(row["question"]), _answers(row), _hops(row, qid), paragraphs)


def _from_contexts(row: dict[str, Any], n: int) -> _RawQuestion:
    qid = str(row.get("_id", row.get("id", n)))
    supporting = {str(fact[0]) for fact in row.get("supporting_facts", []) if fact}
    paragraphs = []
    for item in row.get("context", []):
        title, sentences = str(item[0]), item[1]
        text = _space(" ".join(str(s) for s in sentences) if isinstance(sentences, list) else str(sentences))
        paragraphs.append(_Paragraph(title, text, title in supporting))
    return _RawQuestion(qid, str(row["question"]), _answers(row), _hops(row, qid), paragraphs)


def _raw_questions(rows: Sequence[dict[str, Any]], fmt: str, path: Path) -> list[_RawQuestion]:
    out = []
    for n, row in enumerate(rows):
        if not isinstance(row.get("question"), str):
            raise InputError(f"{path}: row {n + 1} needs a 'question' string")
        out.append(_from_contexts(row, n) if fmt in ("2wiki", "hotpotqa") else _from_paragraphs(row, n))
    return out


def _hipporag_corpus(path: Path) -> list[Document]:
    rows = _read_any(path)
    name = path.stem.removesuffix("_corpus") or "passage"
    docs = []
    for n, row in enumerate(rows):
        if not isinstance(row.get("text"), str):
            raise InputError(f"{path}: row {n + 1} needs a 'text' string")
        meta = {k: v for k, v in row.items() if k not in ("title", "text")}
        docs.append(Document(f"{name}-{n:05d}", row["text"], row.get("title"), meta))
    return docs


def _corpus_from_questions(questions: Sequence[_RawQuestion]) -> list[Document]:
    seen: dict[tuple[str, str], str] = {}
    docs = []
    for q in questions:
        for p in q.paragraphs:
            if (p.title, p.text) not in seen:
                seen[(p.title, p.text)] = f"p{len(seen):05d}"
                docs.append(Document(seen[(p.title, p.text)], p.text, p.title or None))
    return docs


def _link_gold(questions: Sequence[_RawQuestion], documents: Sequence[Document]) -> tuple[list[Question], int]:
    by_content = {((d.title or ""), _space(d.text)): d.id for d in documents}
    by_title: dict[str, list[str]] = {}
    for d in documents:
        by_title.setdefault(d.title or "", []).append(d.id)
    out, unmatched = [], 0
    for q in questions:
        gold: list[str] = []
        for p in q.paragraphs:
            if not p.supporting:
                continue
            found = by_content.get((p.title, p.text))
            if found is None and len(by_title.get(p.title, [])) == 1:
                found = by_title[p.title][0]
            if found is None:
                unmatched += 1
            elif found not in gold:
                gold.append(found)
        out.append(Question(q.id, q.question, q.answers, gold, q.hops))
    return out, unmatched


def load_dataset(questions: str | Path, corpus: str | Path | None = None, format: str = "auto") -> Dataset:
    """Questions with gold passage ids, and the corpus to index (see the module docstring)."""
    if format not in FORMATS:
        raise InputError(f"unknown dataset format {format!r}; choose one of {', '.join(FORMATS)}")
    path = Path(questions)
    if format == "engram" or (format == "auto" and path.suffix == ".jsonl" and _first_has_gold(path)):
        if corpus is None:
            raise InputError("the engram JSONL format needs --corpus")
        return Dataset(load_corpus(corpus), load_questions(path), "engram")
    rows = _read_any(path)
    fmt = detect_format(rows) if format == "auto" else format
    if fmt == "engram":
        return load_dataset(path, corpus, "engram")
    raw = _raw_questions(rows, fmt, path)
    if corpus is None:
        documents = _corpus_from_questions(raw)
    elif Path(corpus).suffix == ".jsonl":
        documents = load_corpus(corpus)
    else:
        documents = _hipporag_corpus(Path(corpus))
    linked, unmatched = _link_gold(raw, documents)
    return Dataset(documents, linked, fmt, unmatched)


def _first_has_gold(path: Path) -> bool:
    rows = read_jsonl(path)
    return bool(rows) and "gold" in rows[0]


def check_gold(dataset: Dataset, source: str | Path, needed: bool = True) -> None:
    """Refuse gold passage ids that are not in the corpus (a typo would lower recall without a word), and, when
    recall is `needed`, questions of which none has gold passages (recall would read 0 everywhere)."""
    ids = {d.id for d in dataset.documents}
    unknown = [(q.id, g) for q in dataset.questions for g in q.gold if g not in ids]
    if unknown:
        first = ", ".join(f"{g!r} (question {q})" for q, g in unknown[:3])
        raise InputError(
            f"{source}: {len(unknown)} gold passage ids are not in the corpus, e.g. {first}: gold ids must be "
            "the corpus's passage ids"
        )
    if needed and dataset.questions and not any(q.gold for q in dataset.questions):
        hint = (
            "each row needs 'gold': [corpus passage ids]"
            if dataset.format == "engram"
            else f"no supporting paragraph of the {dataset.format} rows matched a corpus passage"
        )
        raise InputError(
            f"{source}: no question has gold passages ({hint}), so recall cannot be measured; check the file "
            "and --format (or pass --qa to measure answers alone)"
        )
