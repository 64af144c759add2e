"""Small typed configurations with the papers' defaults."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields
from typing import Any

from engram.errors import InputError
from engram.text import ChunkConfig

FUSIONS = ("significance", "weighted")  # how passage scores alone rank (RetrieveConfig.fusion)


@dataclass(frozen=True)
class GraphConfig:
    """Graph construction. `synonym_threshold` is the paper's 0.8; each phrase keeps at most
    `synonym_top_k` synonym neighbours. Relation edges weigh their support (passages stating them), synonym
    edges their cosine, context edges `context_weight`: 0.5 keeps the phrase-to-phrase / phrase-to-passage
    balance of the reference implementation, which stores every phrase-phrase edge in both directions.

    `ann`: synonym neighbours by approximate nearest-neighbour search (the `ann` extra) - "auto" once
    `ann_min_rows` phrases are searched and the extra is installed, "on" always, "off" never (exact search,
    quadratic in phrases when building).

    `fact_codes`: score a query's facts through 8-bit codes of the fact vectors with an exact re-check of the rows that
    can matter (engram.index.state.coded_rows; the `ann` extra's simsimd) - "auto" from `fact_codes_min_rows` facts with
    the extra installed, "on" always, "off" never. The results are the same either way; the codes are a quarter of the
    float32 vectors a full scan reads at every query (at 10,000 facts 15 MB of float32 per query, by arithmetic;
    bench/README.md measures the shared MuSiQue memory's 16,900 facts both ways).

    `keep_vector_cache`: a directory memory keeps each passage, phrase and fact vector once, in its snapshot
    (docs/format.md); true also keeps them in engram.sqlite's embedding cache: twice the disk for vectors, but a
    damaged snapshot then costs a read of the cache instead of embedding every text again.

    `vector_precision`: "int8" (the default: phrase vectors float16, fact vectors 8 bits a component with a
    scale per row), "float16" (both float16) or "float32", how a memory made with this setting stores its phrase
    and fact vectors (docs/format.md, "Vector precision"); a memory keeps the one it was made with."""

    synonym_threshold: float = 0.8
    synonym_top_k: int = 100
    context_weight: float = 0.5
    ann: str = "auto"
    ann_min_rows: int = 50_000
    fact_codes: str = "auto"
    fact_codes_min_rows: int = 10_000
    keep_vector_cache: bool = False
    vector_precision: str = "int8"

    def __post_init__(self) -> None:
        if not isinstance(self.keep_vector_cache, bool):
            raise InputError(f"graph setting keep_vector_cache must be true or false, not {self.keep_vector_cache!r}")
        if self.vector_precision not in ("float16", "float32", "int8"):
            raise InputError(
                f"graph setting vector_precision must be float16, float32 or int8, not {self.vector_precision!r}"
            )
        for name in ("ann", "fact_codes"):
            value = getattr(self, name)
            if value not in ("auto", "on", "off"):
                raise InputError(f"graph setting {name} must be auto, on or off, not {value!r}")
        _number("graph", "synonym_threshold", self.synonym_threshold, -1.0, 1.0)
        _number("graph", "context_weight", self.context_weight, 0.0, above=True)
        for name in ("synonym_top_k", "ann_min_rows", "fact_codes_min_rows"):
            _number("graph", name, getattr(self, name), 0, whole=True)


@dataclass(frozen=True)
class RetrieveConfig:
    """HippoRAG 2 retrieval: top `fact_top_k` facts go to the recognition filter, at most `max_seeds` phrase
    seeds, passage seeds weighted by `passage_weight` x normalised dense score, PPR damping `damping`.

    The default method (`hipporag2`, engram.retrieve.default) also seeds the phrases the query names
    (`query_links`), scales the paper's fact seeds (from its top `seed_fact_top_k` facts) by
    `fact_seed_weight`, weighs each fact's score exp((score - best) / `fact_temperature`) instead of min-max
    (None: min-max, as the paper), and seeds passages with `prior_weight` x exp((cos - best) /
    `prior_temperature`) instead of `passage_weight` x min-max; it links only the names the query writes as
    names (`named_links`, engram.retrieve.named), seeds the phrases named inside the fact seeds' names at
    `inner_name_weight` x their parent's weight (0: none) and keeps the first stage's best passage first
    (`dense_first`). Its passage scores (the prior, the first passage, the ranking of a query the graph cannot
    seed) are hybrid: the cosine plus `lexical_weight` x the passage's BM25 score over the query's best
    (engram.retrieve.scoring.hybrid_scores; 0: dense alone, as before). A query ranked by its passage scores
    alone (the `hybrid` method, and the default's queries the graph cannot seed) fuses them by `fusion`:
    "significance" (engram.retrieve.scoring.significance_scores: each signal by how far its scores stand
    out for the query, no weight) or "weighted" (the hybrid score above). `hipporag2-paper` ignores these
    eleven."""

    fact_top_k: int = 5
    max_seeds: int = 5
    passage_weight: float = 0.05
    damping: float = 0.5
    node_specificity: bool = True
    use_filter: bool = True
    query_links: bool = True
    seed_fact_top_k: int = 3
    fact_seed_weight: float = 0.5
    prior_weight: float = 0.5
    prior_temperature: float = 0.02
    fact_temperature: float | None = 0.02
    named_links: bool = True
    inner_name_weight: float = 0.15
    dense_first: bool = True
    lexical_weight: float = 0.2
    fusion: str = "significance"

    def __post_init__(self) -> None:
        for name in ("fact_top_k", "max_seeds", "seed_fact_top_k"):
            _number("retrieve", name, getattr(self, name), 1, whole=True)
        for name in ("passage_weight", "fact_seed_weight", "prior_weight", "inner_name_weight"):
            _number("retrieve", name, getattr(self, name), 0.0)
        _number("retrieve", "lexical_weight", self.lexical_weight, 0.0, 10.0)
        if self.fusion not in FUSIONS:
            raise InputError(f"retrieve setting fusion must be one of {', '.join(FUSIONS)}, not {self.fusion!r}")
        _number("retrieve", "damping", self.damping, 0.0, 1.0, below=True)  # 1 would never reset: no solution
        _number("retrieve", "prior_temperature", self.prior_temperature, 0.0, above=True)
        if self.fact_temperature is not None:
            _number("retrieve", "fact_temperature", self.fact_temperature, 0.0, above=True)
        for name in ("node_specificity", "use_filter", "query_links", "named_links", "dense_first"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"retrieve setting {name} must be true or false, not {getattr(self, name)!r}")


def _number(
    section: str,
    name: str,
    value: object,
    low: float,
    high: float = math.inf,
    whole: bool = False,
    above: bool = False,
    below: bool = False,
) -> None:
    """Refuse a setting that is not a number (a whole one with `whole`) from `low` to `high` (`above` / `below`:
    the bound itself excluded), naming the setting and the range."""
    kind = numbers.Integral if whole else numbers.Real  # numpy's numbers too
    ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        number = float(value)  # type: ignore[arg-type]
        ok = (number > low if above else number >= low) and (number < high if below else number <= high)
    if not ok:
        if high == math.inf:
            span = f"{'above' if above else 'at least'} {low:g}"
        else:
            span = f"in {'(' if above else '['}{low:g}, {high:g}{')' if below else ']'}"
        what = "a whole number" if whole else "a number"
        raise InputError(f"{section} setting {name} must be {what} {span}, not {value!r}")


@dataclass(frozen=True)
class MemoryConfig:
    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryConfig:
        """Build from a config-file section, rejecting unknown keys with their accepted names."""
        parts: dict[str, Any] = {}
        for name, kind in (("chunk", ChunkConfig), ("graph", GraphConfig), ("retrieve", RetrieveConfig)):
            values = data.get(name, {})
            known = {f.name for f in fields(kind)}
            if not isinstance(values, dict):
                listed = ", ".join(sorted(known))
                raise InputError(f'"{name}" must be a JSON object of settings ({listed}), not {values!r}')
            unknown = set(values) - known
            if unknown:
                raise InputError(f"unknown {name} settings {sorted(unknown)}; known: {sorted(known)}")
            parts[name] = kind(**values)
        return cls(**parts)
