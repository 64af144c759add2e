"""The offline (spaCy) extractor: triples from a dependency parse, stored under the extractor's identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.errors import MissingDependencyError
from engram.extract.offline import OfflineExtractor, extract_offline, is_offline_source, load_model
from engram.store.records import PassageRow, RecordStore

spacy = pytest.importorskip("spacy", reason="the nlp extra (spaCy) is not installed")

LAKE = (
    "Lake Bled lies in the Julian Alps of north-western Slovenia, beside the town of Bled. It was formed by a "
    "glacier."
)
REVIEW = (
    "The Acme Review is a quarterly journal published by Wiley. Alice Moreau and Bob Stone edited it. "
    "The review was founded in 1990."
)


@pytest.fixture(scope="module")
def extractor() -> OfflineExtractor:
    try:
        load_model()
    except MissingDependencyError:
        pytest.skip("the en_core_web_sm model is not installed")
    return OfflineExtractor()


def test_triples_from_the_parse(extractor: OfflineExtractor) -> None:
    lake, review = extractor.extract([(LAKE, "Lake Bled"), (REVIEW, "Acme Review")])
    assert lake.ok and review.ok
    assert ("Lake Bled", "lies in", "Julian Alps") in lake.triples
    assert ("Lake Bled", "was formed by", "glacier") in lake.triples  # "It" stands for the title
    assert lake.entities[0] == "Lake Bled" and "Slovenia" in lake.entities
    assert ("Acme Review", "published by", "Wiley") in review.triples  # the subject of "is a journal published"
    assert {("Alice Moreau", "edited", "Acme Review"), ("Bob Stone", "edited", "Acme Review")} <= set(review.triples)
    assert ("Acme Review", "was founded in", "1990") in review.triples  # "the review" is the title's noun
    for triple in lake.triples + review.triples:
        assert len(triple) == 3 and all(part.strip() for part in triple)


def test_an_untitled_passage_has_no_title_links(extractor: OfflineExtractor) -> None:
    (outcome,) = extractor.extract([("He was born in Lyon. Paris is the capital of France.", None)])
    assert all(t[1] != "mentions" for t in outcome.triples)
    assert all(t[0] != "He" for t in outcome.triples)  # a pronoun without a title is no phrase
    assert ("Paris", "is", "capital") in outcome.triples


def test_extractions_are_recorded_under_the_extractor_identity(extractor: OfflineExtractor, tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "db.sqlite")
    try:
        rows = [PassageRow("a", "a", "Lake Bled", LAKE, "h1", {}), PassageRow("b", "b", "Lake Bled", LAKE, "h1", {})]
        seen: list[tuple[int, int]] = []
        assert extract_offline(store, extractor, rows, lambda stage, done, total: seen.append((done, total))) == 1
        assert seen[-1] == (1, 1)
        sources = store._read("SELECT source FROM extractions")
        assert len(sources) == 1 and is_offline_source(sources[0][0])
        assert "en_core_web_sm" in sources[0][0]
        assert store.extractions()["h1"].status == "done"
    finally:
        store.close()


def test_a_missing_model_names_the_extra() -> None:
    with pytest.raises(MissingDependencyError, match=r"engram\[nlp\]"):
        load_model("no_such_model_xx")
