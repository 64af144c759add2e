"""What an `IndexState` keeps only to derive its next view faster, behind one object (`StateCaches`).

None of it is part of the graph: dropping any of it (`forget_patch_base`, a new `StateCaches`) changes how long
the next view takes to derive, never what it holds. It is the last view's edge arrays and what changed since
(to patch rather than rebuild, engram.index.view.edges), spare memory for that patch's arrays, a restored patch
base's pending checksums, the 8-bit fact codes (engram.index.state.coded_rows), the fact-to-phrase table as an
array, and which saved state the rows are (the key of the caches saved beside it).
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from engram.graph.synonyms import SynonymLists
from engram.index.state.coded_rows import CodedRows
from engram.index.state.patch_base import PatchBase, Touched
from engram.index.state.rows import Rows
from engram.index.state.saved_tables import Pairs
from engram.index.state.spare_arrays import Spares
from engram.store.snapshot import PendingCheck

IntArray = npt.NDArray[np.int64]


class StateCaches:
    """The state's derivation caches (see the module docstring); `synonyms` are the state's synonym lists, whose
    own record of changed pairs starts and stops with the patch base."""

    def __init__(self, fact_vectors: Rows, synonyms: SynonymLists) -> None:
        self.patch_base: PatchBase | None = None  # the last view's edge arrays, while patching is cheaper
        self.touched: Touched | None = None  # what changed since `patch_base` was taken
        self.spares = Spares()  # memory of patched views no longer read, for the next patch's arrays
        self.base_check: PendingCheck | None = None  # a restored patch base's checksums, computed on a thread
        self.fact_codes = CodedRows(fact_vectors)  # filled by the first query that uses them
        self.saved_as: str | None = None  # the saved state (its state.json checksum) whose rows these rows are
        self._synonyms = synonyms
        self._fact_phrases: IntArray = np.zeros((0, 2), dtype=np.int64)

    def keep_patch_base(self, base: PatchBase) -> None:
        """Hold the view just derived as the base of the next one's patch, and record changes from now on."""
        self.patch_base, self.touched = base, Touched(base.touch_limit())
        self._synonyms.touched = set()

    def forget_patch_base(self) -> None:
        """Drop the patch base and stop recording changes: the next view is built from the tables."""
        self.patch_base = self.touched = self._synonyms.touched = None

    def touch_passage(self, row: int) -> None:
        """Record that a passage's context or aliveness changed (past the limit, drop the base)."""
        if self.touched is not None:
            self.touched.passages.add(row)
            if self.touched.full():
                self.forget_patch_base()

    def touch_relation(self, pair: tuple[int, int]) -> None:
        """Record that the support of a relation pair changed."""
        if self.touched is not None:
            self.touched.relation.add(pair)

    def fact_phrase_array(self, fact_phrases: Pairs) -> IntArray:
        """`fact_phrases` as an (n, 2) array, extended with the facts added since the last call (the table only
        grows), so a commit does not convert every fact again. A new array each time it grows."""
        done, total = len(self._fact_phrases), len(fact_phrases)
        if done < total:
            added = itertools.chain.from_iterable(fact_phrases.added_since(done))
            fresh = np.fromiter(added, dtype=np.int64, count=2 * (total - done)).reshape(-1, 2)
            self._fact_phrases = np.concatenate([self._fact_phrases, fresh])
        return self._fact_phrases

    def restored(self, fact_phrases: Pairs) -> None:
        """Start from a restored state's saved fact-to-phrase array rather than converting every fact again."""
        self._fact_phrases = fact_phrases.saved
