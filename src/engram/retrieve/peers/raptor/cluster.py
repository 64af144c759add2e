"""RAPTOR's clustering as pure functions over numpy arrays (after Sarthi et al., 2024, "RAPTOR: Recursive
Abstractive Processing for Tree-Organized Retrieval", section 3): the node vectors are reduced with UMAP, a
Gaussian mixture whose component count is chosen by BIC clusters them, and a node belongs to every component
whose posterior probability exceeds a threshold (soft clustering). Clustering runs twice: globally (UMAP with
about sqrt(n) neighbours) and then locally inside each global cluster (few neighbours). A cluster whose texts
together exceed the summariser's token budget is clustered again on its own.

Everything is seeded, so the same vectors in the same order give the same clusters (the tree's summaries are
then the same requests, answered by the stored nodes or the response cache). scikit-learn and umap-learn are
imported on first use (the `peers` extra).
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.errors import MissingDependencyError

Points = npt.NDArray[np.floating[Any]]
Cluster = tuple[int, ...]  # sorted indices into the clustered points
MAX_DEPTH = 8  # re-clustering an oversized cluster goes this deep before it is cut by the budget


@dataclass(frozen=True)
class Clustering:
    """`dim`: UMAP's target dimensions (RAPTOR's reduction dimension, 10); groups of at most `dim` + 1 points
    are one cluster; `threshold`: the posterior probability above which a point joins a component (0.1);
    `max_clusters`: the most mixture components BIC chooses from (50); `local_neighbors`: UMAP's neighbours
    inside a global cluster (10); `max_tokens`: a cluster whose texts exceed it is clustered again (3,500);
    `seed`: UMAP's and the mixture's random state."""

    dim: int = 10
    threshold: float = 0.1
    max_clusters: int = 50
    local_neighbors: int = 10
    max_tokens: int = 3500
    seed: int = 224


def _missing(exc: ImportError) -> MissingDependencyError:
    return MissingDependencyError(f"raptor clusters with UMAP and scikit-learn ({exc}): pip install 'engram[peers]'")


def check_installed() -> None:
    """Raises `MissingDependencyError` naming the extra when umap-learn or scikit-learn is missing (without
    importing them: UMAP takes seconds to import)."""
    for name in ("umap", "sklearn"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError, AttributeError):  # a module blocked in sys.modules, a broken install
            found = False
        if not found:
            raise _missing(ImportError(f"No module named {name!r}"))


def reduce(points: Points, neighbors: int, c: Clustering) -> Points:
    """`points` in `c.dim` dimensions by UMAP (cosine metric, seeded); groups too small for UMAP (at most
    `c.dim` + 1 points) are returned unchanged."""
    n = len(points)
    if n <= c.dim + 1:
        return points
    try:
        import umap  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise _missing(exc) from exc
    with warnings.catch_warnings():  # UMAP warns that a seed makes it single-threaded, and about tiny graphs
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(
            n_neighbors=max(2, min(neighbors, n - 1)),
            n_components=min(c.dim, n - 2),
            metric="cosine",
            random_state=c.seed,
            n_jobs=1,
        )
        return np.asarray(reducer.fit_transform(np.asarray(points, dtype=np.float32)), dtype=np.float64)


def memberships(points: Points, c: Clustering) -> list[Cluster]:
    """Soft clusters of `points` (n x d): a Gaussian mixture (full covariances) with the component count of the
    lowest BIC, from 1 to `c.max_clusters` but at most n / (d + 1): a Gaussian in d dimensions is degenerate on
    d points or fewer, and BIC rewards components that collapse onto such a handful (without the cap, three
    well-separated blobs of 20 points in 10 dimensions came out as 13 clusters). Each point joins every
    component whose posterior probability exceeds `c.threshold`, and at least its most probable one. Distinct
    non-empty clusters, ordered by first member."""
    n = len(points)
    if n < 3:
        return [tuple(range(n))] if n else []
    try:
        from sklearn.mixture import GaussianMixture  # type: ignore[import-untyped,unused-ignore]
        from threadpoolctl import threadpool_limits  # scikit-learn's own dependency
    except ImportError as exc:
        raise _missing(exc) from exc
    data = np.asarray(points, dtype=np.float64)
    best: Any = None
    best_bic = math.inf
    most = max(1, min(c.max_clusters, n // (data.shape[1] + 1)))
    # one BLAS thread: the mixture's linear algebra is on d x d matrices (d = `dim`), where OpenBLAS's threads
    # cost more than they save (a 10 x 10 triangular solve took 1.7 ms with 2 threads on a loaded 2-core
    # machine, 72 us with one; most of the build's mixture time)
    with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
        warnings.simplefilter("ignore")  # a mixture that has not converged still has a BIC
        for k in range(1, most + 1):
            try:
                model = GaussianMixture(n_components=k, random_state=c.seed).fit(data)
            except ValueError:  # ill-defined covariances: more components than the points support
                break
            bic = float(model.bic(data))
            if bic < best_bic:
                best, best_bic = model, bic
        if best is None:  # not even one component could be fitted (degenerate points): keep them together
            return [tuple(range(n))]
        probs = best.predict_proba(data)
    member = probs > c.threshold
    member[np.arange(n), probs.argmax(axis=1)] = True
    found = {tuple(int(i) for i in np.flatnonzero(member[:, j])) for j in range(member.shape[1])}
    return sorted(f for f in found if f)


def split_by_budget(members: Cluster, tokens: Sequence[int], budget: int) -> list[Cluster]:
    """`members` cut, in order, into runs whose tokens fit `budget` (a node larger than it stays alone): the
    last resort for a cluster the mixture will not split."""
    runs: list[list[int]] = [[]]
    used = 0
    for i in members:
        if runs[-1] and used + tokens[i] > budget:
            runs.append([])
            used = 0
        runs[-1].append(i)
        used += tokens[i]
    return [tuple(r) for r in runs if r]


def one_component(n: int, c: Clustering) -> bool:
    """Whether a group of `n` points is one cluster without reducing or fitting it: at most `c.dim` + 1 points
    are not reduced and are one cluster; from there to 2 (`c.dim` + 1) - 1 points UMAP reduces them to `c.dim`
    dimensions, where the mixture's cap n / (d + 1) allows a single component, whose posterior is 1 for every
    point. Skipping the UMAP fit and the mixture gives the same cluster."""
    return n < 2 * (c.dim + 1)


def _two_level(points: Points, c: Clustering) -> list[Cluster]:
    """Global clusters (UMAP with about sqrt(n) neighbours), then local clusters inside each one."""
    n = len(points)
    if one_component(n, c):
        return [tuple(range(n))] if n else []
    out: set[Cluster] = set()
    for group in memberships(reduce(points, int(math.sqrt(n - 1)), c), c):
        if one_component(len(group), c):
            out.add(group)
            continue
        sub = points[list(group)]
        for local in memberships(reduce(sub, c.local_neighbors, c), c):
            out.add(tuple(group[i] for i in local))
    return sorted(out)


def cluster_points(points: Points, tokens: Sequence[int], c: Clustering, depth: int = 0) -> list[Cluster]:
    """RAPTOR's clusters of `points` (one row per node; `tokens[i]` the tokens of node i's text): global then
    local soft clustering; a cluster of several nodes whose tokens exceed `c.max_tokens` is clustered again on
    its own (`split_cluster`). Sorted, distinct."""
    out: set[Cluster] = set()
    for members in _two_level(points, c):
        for part in split_cluster(points[list(members)], [tokens[i] for i in members], c, depth):
            out.add(tuple(members[i] for i in part))
    return sorted(out)


def split_cluster(points: Points, tokens: Sequence[int], c: Clustering, depth: int = 0) -> list[Cluster]:
    """One cluster (its members' `points` and `tokens`) kept whole when it is a single node or its tokens fit
    `c.max_tokens`; otherwise clustered again on its own (`cluster_points`), and cut by the budget when that
    does not split it or after `MAX_DEPTH` rounds. Indices into `points`."""
    n = len(points)
    if n <= 1 or sum(tokens) <= c.max_tokens:
        return [tuple(range(n))]
    parts = cluster_points(points, tokens, c, depth + 1) if depth < MAX_DEPTH else []
    if len(parts) < 2:
        parts = split_by_budget(tuple(range(n)), tokens, c.max_tokens)
    return parts
