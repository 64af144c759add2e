"""Placing new nodes into the clusters of an existing RAPTOR layer, so that an addition does not cluster the
whole layer again (`raptor.tree.update`). Pure functions over numpy arrays.

A new node joins the one cluster whose centroid, the mean of its members' unit vectors, has the highest cosine
with the node's vector. The space is the embedding space (the memory's passage vectors at the first layer, the
summaries' vectors above), not UMAP's reduced space: the fitted UMAP is not kept (it would have to be stored
as a pickle, or fitted again over the whole layer, which is the cost placing avoids), and the embedding space
is the one the collapsed tree ranks in. Every node is placed against the clusters as they were before the
write, so the result does not depend on the order in which new nodes arrive."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Points = npt.NDArray[np.floating[Any]]


def unit_rows(points: Points) -> npt.NDArray[np.float64]:
    """`points` as float64 rows of length 1 (a zero row stays zero)."""
    data = np.asarray(points, dtype=np.float64)
    norms = np.linalg.norm(data, axis=1, keepdims=True)
    out: npt.NDArray[np.float64] = np.divide(data, norms, out=np.zeros_like(data), where=norms > 0)
    return out


def centroids(groups: Sequence[Points]) -> npt.NDArray[np.float64]:
    """One unit row per group: the normalised mean of its members' unit vectors (each group non-empty)."""
    return unit_rows(np.vstack([unit_rows(g).mean(axis=0) for g in groups]))


def place(groups: Sequence[Points], fresh: Points) -> list[int]:
    """For each row of `fresh`, the index of the group (its members' vectors, one row each) whose centroid has
    the highest cosine with it; the first such group on a tie. Empty `fresh`: []."""
    if len(fresh) == 0:
        return []
    if not groups:
        raise ValueError("no cluster to place new nodes into")
    scores = unit_rows(fresh) @ centroids(groups).T
    return [int(i) for i in scores.argmax(axis=1)]
