"""A synthetic corpus for the scale benchmark (issue 11): passages, their extractions and queries.

Shape, chosen to match the issue's "~8 phrases and ~9 facts per passage, ~8M phrase nodes at 1M passages" and
real text's statistics:

* 8-10 triples per passage (9 on average), each naming a subject and an object phrase (18 mentions);
* the phrase vocabulary grows like Heaps' law, ``phrases(n) = C * n ** 0.95`` with C set so that 1M passages
  name ~8M phrases (about 10 new phrases per passage at 10k, 9 at 100k, 8 at 1M): growth is sub-linear, the
  way a vocabulary grows, but only slightly;
* mentions that are not new reuse an existing phrase with Zipf-like popularity, P(rank r) ~ r^-0.7 with the
  oldest phrases the most popular: a few hubs are named by a few percent of all passages (like "United
  States" in Wikipedia), most phrases by one or two;
* 10% of new phrases are variants of an existing one (a word added, or a plural): synonym candidates.

Everything is drawn from one seeded generator, so a size always gives the same corpus. No model is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from engram import Document

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "or", "en")]
RELATIONS = [
    "is located in", "was born in", "founded", "is part of", "married", "directed", "was released in",
    "is the capital of", "plays for", "was written by", "is a member of", "borders", "succeeded", "won",
]  # fmt: skip
HEAPS_EXPONENT = 0.95
PHRASES_AT_1M = 8_000_000
HEAPS_C = PHRASES_AT_1M / 1_000_000**HEAPS_EXPONENT
ZIPF_S = 0.7  # reuse popularity P(rank r) ~ r^-s, sampled as rank = n * u^(1 / (1 - s))
VARIANT_SHARE = 0.1


class _Uniform:
    """Uniform [0, 1) draws from a seeded generator, handed out from a buffer (a numpy call per draw would
    dominate the generation time)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.buffer: list[float] = []

    def __call__(self) -> float:
        if not self.buffer:
            self.buffer = self.rng.random(1 << 16).tolist()
        return self.buffer.pop()

    def below(self, n: int) -> int:
        return int(self() * n)


class Corpus:
    """Deterministic passages with extractions; the phrase vocabulary grows as passages are made."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.u = _Uniform(seed)
        self.phrases: list[str] = []
        self._known: set[str] = set()
        self.made = 0

    def _word(self) -> str:
        u, count = self.u, len(SYLLABLES)
        return "".join(SYLLABLES[u.below(count)] for _ in range(2 + u.below(2)))

    def _new_phrase(self) -> str:
        while True:
            if self.phrases and self.u() < VARIANT_SHARE:
                base = self._reuse(self.u())
                phrase = base + (" " + self._word().title() if self.u() < 0.5 else "s")
            else:
                phrase = " ".join(self._word() for _ in range(1 + self.u.below(3))).title()
            if phrase not in self._known:
                self._known.add(phrase)
                self.phrases.append(phrase)
                return phrase

    def _reuse(self, u: float) -> str:
        n = len(self.phrases)
        return self.phrases[min(n - 1, int(n * u ** (1.0 / (1.0 - ZIPF_S))))]

    def passage(self) -> tuple[Document, dict[str, Any]]:
        i = self.made
        self.made += 1
        u = self.u
        n_triples = 8 + u.below(3)
        slots = 2 * n_triples
        due = round(HEAPS_C * (i + 1) ** HEAPS_EXPONENT) - len(self.phrases)
        fresh = min(slots, max(0 if self.phrases else 1, due))
        order = sorted(range(slots), key=lambda _: u())
        mentions = [""] * slots
        for k, slot in enumerate(order):
            mentions[slot] = self._new_phrase() if k < fresh else self._reuse(u())
        triples = [
            [mentions[2 * t], RELATIONS[u.below(len(RELATIONS))], mentions[2 * t + 1]] for t in range(n_triples)
        ]
        text = " ".join(f"{s} {r} {o}." for s, r, o in triples)
        doc_id = f"doc{i:07d}"
        entities = sorted({t[0] for t in triples} | {t[2] for t in triples})
        return Document(doc_id, text, title=triples[0][0]), {"id": doc_id, "entities": entities, "triples": triples}

    def batches(self, total: int, size: int) -> Iterator[tuple[list[Document], list[dict[str, Any]]]]:
        """`total` passages in batches of `size` (documents, extractions)."""
        while self.made < total:
            docs, extractions = [], []
            for _ in range(min(size, total - self.made)):
                doc, extraction = self.passage()
                docs.append(doc)
                extractions.append(extraction)
            yield docs, extractions

    def queries(self, count: int, seed: int = 1) -> list[str]:
        """Questions naming phrases of the corpus (popular and rare ones alike)."""
        u = _Uniform(seed)
        out = []
        for _ in range(count):
            a = self.phrases[u.below(len(self.phrases))]
            b = self._reuse(u())
            out.append(f"Which place {RELATIONS[u.below(len(RELATIONS))]} {a} and {b}?")
        return out
