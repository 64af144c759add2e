"""What changed since the last view, for patching the next one (engram.index.view.edges) instead of rebuilding it.

`IndexState` records, while a `PatchBase` (the last view's edge arrays) is held: relation pairs whose support
changed, passages whose context or aliveness changed; `SynonymLists` records the phrase pairs whose synonym
edge appeared, went or changed. Past `limit` touched items a rebuild is cheaper: the base is dropped and
nothing more is recorded until the next view."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.graph.ppr import SymmetricWalk

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass
class Touched:
    limit: int
    relation: set[tuple[int, int]] = field(default_factory=set)
    passages: set[int] = field(default_factory=set)

    def full(self) -> bool:
        return len(self.relation) + len(self.passages) > self.limit


@dataclass(frozen=True)
class PatchBase:
    """The last view's edge arrays: its canonical adjacency (unnormalised) over `node_rows` (row-space nodes,
    phrases then passages, with `n_phrases` phrase rows), relation table, context table and walk."""

    adjacency: sp.csr_matrix
    node_rows: IntArray
    n_phrases: int
    relation: IntArray
    support: FloatArray
    relation_keys: IntArray  # `engram.graph.pair_arrays.pair_keys` of `relation`
    context: IntArray
    phrase_passages: FloatArray  # by phrase row: its passages in `context`
    walk: SymmetricWalk  # the adjacency's walk (patched along with it)

    def touch_limit(self) -> int:
        """Touched items past which rebuilding is cheaper than patching."""
        return max(4096, int(self.adjacency.nnz) // 16)
