"""Dataset loaders on tiny hand-written files in each format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram.errors import InputError
from engram.eval.loaders import load_dataset


def write(path: Path, data: object, jsonl: bool = False) -> Path:
    if jsonl:
        assert isinstance(data, list)
        path.write_text("".join(json.dumps(row) + "\n" for row in data), encoding="utf-8")
    else:
        path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_engram_jsonl(tmp_path: Path) -> None:
    rows = [{"id": "p1", "title": "T", "text": "x"}, {"id": "p2", "text": "y"}]
    corpus = write(tmp_path / "corpus.jsonl", rows, True)
    questions = write(
        tmp_path / "q.jsonl",
        [{"id": "q1", "question": "?", "answers": ["A"], "gold": ["p1"], "hops": "2hop"}],
        True,
    )
    data = load_dataset(questions, corpus)
    assert data.format == "engram"
    assert [d.id for d in data.documents] == ["p1", "p2"]
    q = data.questions[0]
    assert (q.id, q.gold, q.answers, q.hops) == ("q1", ["p1"], ["A"], "2hop")
    with pytest.raises(InputError):
        load_dataset(questions)  # our format needs the corpus


HIPPORAG_QUESTIONS = [
    {
        "id": "2hop__1_2",
        "question": "Where was the founder of Acme born?",
        "answer": ["Lyon"],
        "answerable": True,
        "paragraphs": [
            {"title": "Acme", "text": "Acme was founded by  Alice.", "is_supporting": True, "idx": 0},
            {"title": "Alice", "text": "Alice was born in Lyon.", "is_supporting": True, "idx": 1},
            {"title": "Noise", "text": "Unrelated.", "is_supporting": False, "idx": 2},
        ],
    }
]


def test_hipporag_release_with_corpus(tmp_path: Path) -> None:
    corpus = write(
        tmp_path / "sample_corpus.json",
        [
            {"title": "Noise", "text": "Unrelated."},
            {"title": "Acme", "text": "Acme was founded by Alice."},  # whitespace differs from the question's copy
            {"title": "Alice", "text": "Alice was born in Lyon (France)."},  # text differs: matched by unique title
        ],
    )
    questions = write(tmp_path / "sample.json", HIPPORAG_QUESTIONS)
    data = load_dataset(questions, corpus)
    assert data.format == "hipporag"
    assert [d.id for d in data.documents] == ["sample-00000", "sample-00001", "sample-00002"]
    q = data.questions[0]
    assert q.gold == ["sample-00001", "sample-00002"] and q.answers == ["Lyon"] and q.hops == "2hop"
    assert data.unmatched_gold == 0


def test_hipporag_release_without_corpus_builds_one(tmp_path: Path) -> None:
    data = load_dataset(write(tmp_path / "sample.json", HIPPORAG_QUESTIONS + HIPPORAG_QUESTIONS))
    assert [d.id for d in data.documents] == ["p00000", "p00001", "p00002"]  # paragraphs deduplicated
    assert data.documents[0].text == "Acme was founded by Alice."
    assert data.questions[0].gold == ["p00000", "p00001"] == data.questions[1].gold


def test_unmatched_gold_is_counted(tmp_path: Path) -> None:
    corpus = write(tmp_path / "c_corpus.json", [{"title": "Acme", "text": "Acme was founded by Alice."}])
    data = load_dataset(write(tmp_path / "q.json", HIPPORAG_QUESTIONS), corpus)
    assert data.questions[0].gold == ["c-00000"] and data.unmatched_gold == 1


def test_raw_musique(tmp_path: Path) -> None:
    rows = [
        {
            "id": "3hop1__1_2_3",
            "question": "Who?",
            "answer": "Karl Renner",
            "answer_aliases": ["Renner"],
            "answerable": True,
            "paragraphs": [
                {"idx": 0, "title": "A", "paragraph_text": "First.", "is_supporting": False},
                {"idx": 1, "title": "B", "paragraph_text": "Second.", "is_supporting": True},
            ],
        }
    ]
    data = load_dataset(write(tmp_path / "musique_ans_v1.0_dev.jsonl", rows, jsonl=True))
    assert data.format == "musique"
    q = data.questions[0]
    assert q.answers == ["Karl Renner", "Renner"] and q.hops == "3hop1" and q.gold == ["p00001"]


def test_raw_2wiki_and_hotpotqa(tmp_path: Path) -> None:
    wiki = [
        {
            "_id": "abc",
            "type": "compositional",
            "question": "Who is the father of X?",
            "context": [["X", ["X is a person.", "X's father is Y."]], ["Z", ["Z is noise."]]],
            "supporting_facts": [["X", 1]],
            "evidences": [["X", "father", "Y"]],
            "answer": "Y",
        }
    ]
    data = load_dataset(write(tmp_path / "dev.json", wiki))
    assert data.format == "2wiki"
    assert data.documents[0].text == "X is a person. X's father is Y."
    assert data.questions[0].gold == ["p00000"] and data.questions[0].hops == "compositional"
    hotpot = [
        {
            "_id": "h1",
            "type": "bridge",
            "level": "hard",
            "question": "Which magazine?",
            "answer": "Arthur's Magazine",
            "context": [
                ["Arthur's Magazine", ["Arthur's Magazine was a periodical.", " It was edited by T.S. Arthur."]]
            ],
            "supporting_facts": [["Arthur's Magazine", 0]],
        }
    ]
    data = load_dataset(write(tmp_path / "hotpot_dev.json", hotpot))
    assert data.format == "hotpotqa"
    assert data.documents[0].text == "Arthur's Magazine was a periodical. It was edited by T.S. Arthur."
    assert data.questions[0].answers == ["Arthur's Magazine"] and data.questions[0].hops == "bridge"


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        load_dataset(write(tmp_path / "q.json", [{"no": "question"}]))
    with pytest.raises(InputError):
        load_dataset(write(tmp_path / "q.json", HIPPORAG_QUESTIONS), format="nope")
    with pytest.raises(InputError):
        load_dataset(tmp_path / "missing.json")
