"""The live graph: rows that only grow (dead rows are masked, never moved), updated in place per change.

Passages, phrases and facts get a row when first seen and keep it; deleting a document marks its passages dead
and withdraws their support, so phrases and facts that no alive passage states die too (they come back to the
same row if re-added). Everything retrieval reads is derived per commit by `view()`. Because counts, lists and
tie-breaks are defined on keys rather than rows, any sequence of changes gives the same graph as a build from
scratch on the surviving documents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from engram.config import GraphConfig
from engram.errors import InputError
from engram.graph import ann
from engram.graph.build import normalize_triple
from engram.graph.synonyms import SynonymLists
from engram.index.state.fact_pair_keys import FactRows, PairCounts
from engram.index.state.key_rows import KeyRows
from engram.index.state.phrase_names import NameTable
from engram.index.state.rows import ROLE_DTYPES, Rows, SortedKeys
from engram.index.state.saved_tables import Pairs, RowSets, Triples
from engram.index.state.state_caches import StateCaches
from engram.store.records import PassageRow
from engram.types import Triple

Vectors = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
EmbedFn = Callable[[str, Sequence[str]], Vectors]


def ann_rows(config: GraphConfig) -> int | None:
    """From how many searched rows on the ANN index is used (None: never), by `config.ann`."""
    if config.ann == "off" or (config.ann == "auto" and not ann.available()):
        return None
    if config.ann == "on":
        if not ann.available():
            raise InputError(ann.INSTALL)
        return 0
    return config.ann_min_rows


def passage_text(row: PassageRow) -> str:
    """What is embedded for a passage: its title line, then its text."""
    return f"{row.title}\n{row.text}" if row.title else row.text


def fact_text(fact: Triple) -> str:
    return " ".join(fact)


@dataclass
class Changes:
    """Phrases that came alive or died in the current batch (for the synonym lists)."""

    new_phrases: set[int] = field(default_factory=set)
    dead_phrases: set[int] = field(default_factory=set)


class IndexState:
    """The graph's tables, changed in place per passage (`add_passage`, `set_triples`, `remove_passage`) and read
    by `engram.index.view.graph_index.view` at each commit; `caches` holds what only speeds that up.
    `precision`: how the vectors are stored (`ROLE_DTYPES`: float16 phrase and fact vectors for the memories
    made since they are, docs/format.md; passage vectors stay float32)."""

    def __init__(self, dim: int, config: GraphConfig, precision: str = "float32") -> None:
        self.config = config
        self.passages: list[PassageRow] = []
        self.passage_row: dict[str, int] = {}
        self.hash_rows: dict[str, set[int]] = {}  # content hash -> rows with that content (alive or not)
        self.passage_alive: list[bool] = []
        self.passage_status: list[str] = []  # "done", "failed" or "pending"
        self.passage_facts = RowSets()  # fact rows of each passage
        self.passage_context: list[IntArray] = []  # phrase rows linked to each passage
        self.passage_dropped: list[int] = []  # malformed triples in its extraction
        self.phrases: list[str] = []
        self.phrase_row = KeyRows(self.phrases)  # key -> row, by a saved hash table after a restore
        self.names = NameTable(self.phrases, self.phrase_row)  # query-linking names, kept as phrases come and go
        self.phrase_refs: list[int] = []  # alive facts naming the phrase
        self._alive_mask = np.zeros(16, dtype=bool)
        self._fact_alive = np.zeros(16, dtype=bool)  # fact_support > 0
        self._relations: dict[str, str] = {}  # one string object per relation, shared by the facts naming it
        # running totals over alive passages, so stats() is O(1) rather than O(size) per call
        self._counts = {
            "passages": 0,
            "facts": 0,
            "context_edges": 0,
            "dropped": 0,
            "pending": 0,
            "failed": 0,
            "done": 0,
        }  # phrase_refs > 0, kept as an array for O(1)-per-row upkeep
        self.facts = Triples()  # (subject, relation, object) of each fact row
        self.fact_row = FactRows()  # the saved facts' arrays after a restore, searched by key
        self.fact_phrases = Pairs()  # (subject row, object row) of each fact
        self.fact_support: list[int] = []  # alive passages stating the fact
        self.relation = PairCounts()  # pair -> facts joining it
        self.vectors = {role: Rows(dim, dtype) for role, dtype in ROLE_DTYPES[precision].items()}
        self.synonyms = SynonymLists(config.synonym_threshold, config.synonym_top_k, ann_min_rows=ann_rows(config))
        self.changes = Changes()
        # alive keys in canonical (sorted) order: the graph's node order, so that results never depend on
        # the order documents arrived in
        self.passage_order: SortedKeys[str] = SortedKeys()
        self.phrase_order: SortedKeys[str] = SortedKeys()
        self.fact_order: SortedKeys[Triple] = SortedKeys()
        # what only makes the next view faster to derive (the last view's edges to patch, fact codes, ...)
        self.caches = StateCaches(self.vectors["fact"], self.synonyms)

    # passages -----------------------------------------------------------------------------------------
    def add_passage(self, row: PassageRow, vector: Vectors) -> int:
        existing = self.passage_row.get(row.id)
        if existing is not None:
            if self.passage_alive[existing]:
                raise ValueError(f"passage {row.id} is already alive")
            self.hash_rows.get(self.passages[existing].content_hash, set()).discard(existing)
            self.hash_rows.setdefault(row.content_hash, set()).add(existing)
            self.passages[existing] = row
            self.passage_alive[existing] = True
            self.caches.touch_passage(existing)
            self._tally(existing, +1)
            self.passage_order.touch(row.id, existing)
            self.vectors["passage"].set_row(existing, vector.reshape(-1))
            return existing
        index = len(self.passages)
        self.hash_rows.setdefault(row.content_hash, set()).add(index)
        self.passages.append(row)
        self.passage_row[row.id] = index
        self.passage_alive.append(True)
        self.passage_order.touch(row.id, index)
        self.passage_status.append("pending")
        self.passage_facts.append(frozenset())
        self.passage_context.append(np.zeros(0, dtype=np.int64))
        self.passage_dropped.append(0)
        self.caches.touch_passage(index)
        self.vectors["passage"].append(vector.reshape(1, -1))
        self._tally(index, +1)
        return index

    def remove_passage(self, passage_id: str) -> None:
        index = self.passage_row[passage_id]
        self.set_triples(index, "pending", [])
        self._tally(index, -1)
        self.passage_alive[index] = False
        self.passage_order.touch(passage_id, index)

    def stats(self) -> dict[str, int]:
        """The counts `GraphIndex.stats()` reports, from running totals (no view needed)."""
        c = self._counts
        relation, synonym = len(self.relation), self.synonyms.edge_count()
        return {
            "passages": c["passages"],
            "phrases": int(np.count_nonzero(self._alive_mask[: len(self.phrases)])),
            "facts": c["facts"],
            "relation_edges": relation,
            "synonym_edges": synonym,
            "context_edges": c["context_edges"],
            "edges": relation + synonym + c["context_edges"],
            "pending": c["pending"],
            "failed": c["failed"],
        }

    def dropped(self) -> int:
        """Malformed triples in the extractions of alive passages."""
        return self._counts["dropped"]

    def alive_with_content(self, content_hash: str) -> list[int]:
        return sorted(r for r in self.hash_rows.get(content_hash, ()) if self.passage_alive[r])

    def set_triples(self, index: int, status: str, triples: Sequence[Sequence[object]]) -> None:
        """Replace a passage's facts (its status is "done", "failed" or "pending")."""
        self.caches.touch_passage(index)
        normalised = [normalize_triple(t) for t in triples]
        keys = {k for k in normalised if k is not None}
        new = frozenset(self._fact(k) for k in keys)
        old = self.passage_facts[index]
        self._withdraw(old - new, old)
        self._support(new - old, new)
        alive = self.passage_alive[index]
        if alive:
            self._tally(index, -1)
        self.passage_facts[index] = new
        self.passage_status[index] = status
        self.passage_dropped[index] = sum(1 for k in normalised if k is None)
        linked = {p for f in new for p in self.fact_phrases[f]}
        self.passage_context[index] = np.array(sorted(linked), dtype=np.int64)
        if alive:
            self._tally(index, +1)

    def _tally(self, index: int, sign: int) -> None:
        """Add (+1) or take away (-1) an alive passage's share of the running totals."""
        self._counts["passages"] += sign
        self._counts["context_edges"] += sign * len(self.passage_context[index])
        self.names.tally(self.passage_context[index], sign)
        self._counts["dropped"] += sign * self.passage_dropped[index]
        self._counts[self.passage_status[index]] += sign

    def _pairs(self, facts: frozenset[int]) -> set[tuple[int, int]]:
        pairs = set()
        for f in facts:
            a, b = self.fact_phrases[f]
            if a != b:
                pairs.add((min(a, b), max(a, b)))
        return pairs

    def _support(self, added: frozenset[int], now: frozenset[int]) -> None:
        before = self._pairs(now - added)
        for f in added:
            self.fact_support[f] += 1
            if self.fact_support[f] == 1:
                self._fact_alive[f] = True
                self._counts["facts"] += 1
                self.fact_order.touch(self.facts[f], f)
                for p in set(self.fact_phrases[f]):
                    self._ref(p, +1)
        for pair in self._pairs(now) - before:
            self.relation[pair] = self.relation.get(pair, 0) + 1
            self.caches.touch_relation(pair)

    def _withdraw(self, removed: frozenset[int], before_facts: frozenset[int]) -> None:
        after = self._pairs(before_facts - removed)
        for pair in self._pairs(before_facts) - after:
            left = self.relation[pair] - 1
            if left:
                self.relation[pair] = left
            else:
                del self.relation[pair]
            self.caches.touch_relation(pair)
        for f in removed:
            self.fact_support[f] -= 1
            if self.fact_support[f] == 0:
                self._fact_alive[f] = False
                self._counts["facts"] -= 1
                self.fact_order.touch(self.facts[f], f)
                for p in set(self.fact_phrases[f]):
                    self._ref(p, -1)

    def _ref(self, phrase: int, delta: int) -> None:
        self.phrase_refs[phrase] += delta
        self._alive_mask[phrase] = self.phrase_refs[phrase] > 0
        if delta > 0 and self.phrase_refs[phrase] == 1:
            self.phrase_order.touch(self.phrases[phrase], phrase)
            if phrase in self.changes.dead_phrases:
                self.changes.dead_phrases.discard(phrase)
            else:
                self.changes.new_phrases.add(phrase)
        elif delta < 0 and self.phrase_refs[phrase] == 0:
            self.phrase_order.touch(self.phrases[phrase], phrase)
            if phrase in self.changes.new_phrases:
                self.changes.new_phrases.discard(phrase)
            else:
                self.changes.dead_phrases.add(phrase)

    def _phrase(self, key: str) -> int:
        row = self.phrase_row.get(key)
        if row is None:
            row = self.phrase_row[key] = len(self.phrases)
            self.phrases.append(key)
            self.phrase_refs.append(0)
            if len(self.phrases) > len(self._alive_mask):
                grown = np.zeros(2 * len(self.phrases), dtype=bool)
                grown[: len(self._alive_mask)] = self._alive_mask
                self._alive_mask = grown
        return row

    def _fact(self, key: Triple) -> int:
        row = self.fact_row.get(key)
        if row is None:
            subject, obj = self._phrase(key[0]), self._phrase(key[2])
            # the key made of the phrases' own strings: a million facts do not keep a million copies of them
            key = (self.phrases[subject], self._relations.setdefault(key[1], key[1]), self.phrases[obj])
            row = self.fact_row[key] = len(self.facts)
            self.facts.append(key)
            self.fact_phrases.append((subject, obj))
            self.fact_support.append(0)
            if len(self.facts) > len(self._fact_alive):
                grown = np.zeros(2 * len(self.facts), dtype=bool)
                grown[: len(self._fact_alive)] = self._fact_alive
                self._fact_alive = grown
        return row

    def canonical_nodes(self, order: dict[str, IntArray]) -> IntArray:
        """The graph's nodes in canonical order, as rows of the node space (phrase rows, then passage rows after
        them), from `canonical_rows()`."""
        return np.concatenate([order["phrase"], len(self.phrases) + order["passage"]]).astype(np.int64)

    def canonical_rows(self) -> dict[str, IntArray]:
        """Rows of the alive passages, phrases and facts, each sorted by key (the graph's node order)."""
        return {
            "passage": self.passage_order.rows(lambda rows: np.array([self.passage_alive[r] for r in rows.tolist()])),
            "phrase": self.phrase_order.rows(lambda rows: self._alive_mask[rows]),
            "fact": self.fact_order.rows(lambda rows: self._fact_alive[rows]),
        }

    def totals(self) -> dict[str, int]:
        """The running totals over alive passages (a copy), as `restored` takes them back."""
        return dict(self._counts)

    def restored(self, totals: dict[str, int], relations: list[str]) -> None:
        """Finish a state whose tables `engram.index.saved.state_file` filled from a saved state: the running totals,
        the alive masks and the shared relation strings (`relations`: the string objects its facts hold)."""
        if set(totals) != set(self._counts):
            raise ValueError("saved totals do not name the expected counts")
        self._counts = {k: int(v) for k, v in totals.items()}
        self._alive_mask = np.array(self.phrase_refs, dtype=np.int64) > 0
        self._fact_alive = np.array(self.fact_support, dtype=np.int64) > 0
        self._relations = {r: r for r in relations}
        self.caches.restored(self.fact_phrases)

    def phrase_alive_mask(self) -> npt.NDArray[np.bool_]:
        """phrase_refs > 0, one bool per phrase row (a copy)."""
        mask: npt.NDArray[np.bool_] = self._alive_mask[: len(self.phrases)].copy()
        return mask

    def fact_alive_mask(self) -> npt.NDArray[np.bool_]:
        """fact_support > 0, one bool per fact row (a copy)."""
        mask: npt.NDArray[np.bool_] = self._fact_alive[: len(self.facts)].copy()
        return mask

    def fact_phrase_array(self) -> IntArray:
        """`fact_phrases` as an (n, 2) array (kept up to date by the caches, not converted again per commit)."""
        return self.caches.fact_phrase_array(self.fact_phrases)

    # vectors and synonyms -----------------------------------------------------------------------------
    def missing_vectors(self) -> dict[str, list[int]]:
        """Rows of phrases and facts that have no vector yet (new since the last batch)."""
        return {
            "phrase": list(range(self.vectors["phrase"].size, len(self.phrases))),
            "fact": list(range(self.vectors["fact"].size, len(self.facts))),
        }

    def alive_phrases(self) -> IntArray:
        return np.flatnonzero(self._alive_mask[: len(self.phrases)]).astype(np.int64)

    def update_synonyms(self) -> set[int]:
        """Apply the batch's phrase births and deaths to the synonym lists; returns phrase rows whose lists
        changed (to persist)."""
        phrases = self.vectors["phrase"]
        vectors = phrases.view()

        def of(rows: IntArray) -> Vectors:
            if len(rows) and bool((np.diff(rows) == 1).all()):  # a run of consecutive rows: a view, no copy
                return vectors[rows[0] : rows[-1] + 1]
            return phrases.gather(vectors, rows)

        alive = self.alive_phrases()
        new = np.array(sorted(set(self.changes.new_phrases)), dtype=np.int64)
        changed: set[int] = set()
        if self.changes.dead_phrases:
            dead = np.array(sorted(set(self.changes.dead_phrases)), dtype=np.int64)
            # lists recomputed here must not see this batch's new phrases: `add` merges those in next
            older = self._alive_mask[: len(self.phrases)].copy()
            older[new] = False
            changed |= self.synonyms.remove(dead, np.flatnonzero(older).astype(np.int64), of, self.phrases)
        if len(new):
            changed |= self.synonyms.add(new, alive, of, self.phrases)
        self.changes = Changes()
        return changed
