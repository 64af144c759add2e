"""The live state saved beside the vector snapshot, so that opening a memory takes it back instead of rebuilding
it from every passage's extraction.

A snapshot `index/g<N>/` (engram.store.snapshot) also holds `state.json` (format version, generation, vector
width, passage ids and content hashes by row, the full rows of dead passages, phrase keys by row, relation
strings, running totals, the query-name table's words) and `state-<name>.npy` arrays (per-row flags and counts,
each passage's facts and context phrases as offsets + rows, each fact's phrase rows and relation, relation
edge supports, the canonical orders, the name table, the synonym lists; optional: the hash tables of the phrase
keys and name words, engram.index.state.key_rows, absent from states saved before them), and the current graph's edge
arrays when the state holds its last view's (`walk-<name>.npy`, engram.index.view.saved_walk: patched at the save when
changes came after that view). All are covered by the snapshot's checksum manifest.
The vectors are the snapshot's `<role>.npy`, whose rows are the state's rows, memory-mapped copy-on-write.

It is used only for the generation it was written at, when every file matches its checksum and the alive
passages it names are exactly the stored ones with the same content; otherwise (or for another format version)
the state is rebuilt from the records as before. Either way the result is the same state.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from engram.bulk import collector_paused
from engram.config import GraphConfig
from engram.index.state.index_state import IndexState
from engram.index.view.edges import derive_edges
from engram.index.view.saved_walk import current_base, patchable, restore_walk, walk_files
from engram.store.rows import PassageRow
from engram.store.snapshot import ROLES, PendingCheck, Writer, array_writer, verified_files
from engram.store.snapshot_parts import SavedFile, SavedPart, listed_key_name, part_name, part_names

FORMAT = 3  # 3: int64 tables whose values fit are saved as int32 (listed in `narrowed`); 2 is still read
READ_FORMATS = (2, 3)
STATUS = ("done", "failed", "pending")
ARRAYS = [
    "passage_alive",
    "passage_status",
    "passage_dropped",
    "facts_offsets",
    "facts_rows",
    "context_offsets",
    "context_rows",
    "phrase_refs",
    "fact_phrases",
    "fact_relation",
    "fact_support",
    "relation_pairs",
    "relation_counts",
    "order_passage",
    "order_phrase",
    "order_fact",
    "names_offsets",
    "names_words",
    "names_counts",
    "synonym_rows",
    "synonym_offsets",
    "synonym_neighbours",
    "synonym_sims",
]
# the key tables of engram.index.state.key_rows (sorted hashes, rows): saved since they came, read when present
KEY_TABLES = ["phrase_hashes", "phrase_rows", "names_word_hashes", "names_word_rows"]
TABLES = ["state.json", *(f"state-{a}.npy" for a in ARRAYS)]
OPTIONAL = [f"state-{a}.npy" for a in KEY_TABLES]
log = logging.getLogger(__name__)
Array = npt.NDArray[Any]
T = TypeVar("T")


def _flat(parts: Sequence[Array]) -> tuple[Array, Array]:
    """(offsets, rows) of a list of row arrays."""
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths)])
    rows = np.concatenate([np.zeros(0, dtype=np.int64), *parts]).astype(np.int64, copy=False)
    return offsets, rows


def _relation_arrays(state: IndexState) -> tuple[Array, Array]:
    """The relation pairs (R x 2, sorted) and their counts."""
    return state.relation.arrays()


def _passage_fields(row: PassageRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "doc_id": row.doc_id,
        "title": row.title,
        "text": row.text,
        "content_hash": row.content_hash,
        "metadata": row.metadata,
    }


def state_files(state: IndexState, generation: int) -> dict[str, Writer]:
    """The writers of the state's files, for `write_snapshot`'s `extra`."""
    facts = state.facts.listed()
    relations = sorted({f[1] for f in facts})
    relation_id = {r: i for i, r in enumerate(relations)}
    state.names.count(state.passage_context, state.passage_alive)  # saved with the counts: none to redo at open
    names, name_arrays = state.names.saved()
    order = state.canonical_rows()
    relation_pairs, relation_counts = _relation_arrays(state)
    arrays: dict[str, Array] = {
        "passage_alive": np.array(state.passage_alive, dtype=bool),
        "passage_status": np.array([STATUS.index(s) for s in state.passage_status], dtype=np.uint8),
        "passage_dropped": np.array(state.passage_dropped, dtype=np.int64),
        "phrase_refs": np.array(state.phrase_refs, dtype=np.int64),
        "fact_phrases": state.fact_phrase_array(),
        "fact_relation": np.array([relation_id[f[1]] for f in facts], dtype=np.int64),
        "fact_support": np.array(state.fact_support, dtype=np.int64),
        "relation_pairs": relation_pairs,
        "relation_counts": relation_counts,
        "order_passage": order["passage"],
        "order_phrase": order["phrase"],
        "order_fact": order["fact"],
        "names_offsets": name_arrays["offsets"],
        "names_words": name_arrays["words"],
        "names_word_hashes": name_arrays["word_hashes"],
        "names_word_rows": name_arrays["word_rows"],
    }
    arrays["phrase_hashes"], arrays["phrase_rows"] = state.phrase_row.saved()
    arrays["facts_offsets"], arrays["facts_rows"] = state.passage_facts.flat()
    arrays["context_offsets"], arrays["context_rows"] = _flat(state.passage_context)
    arrays["names_counts"] = name_arrays.get("counts", np.zeros(0, dtype=np.int64))
    arrays.update({f"synonym_{k}": v for k, v in state.synonyms.saved().items()})
    narrowed = sorted(name for name, array in arrays.items() if _fits_int32(array))
    arrays.update({name: arrays[name].astype(np.int32) for name in narrowed})
    node_rows = state.canonical_nodes(order)
    if current_base(state, node_rows) is None and patchable(state):  # changes since the last view: patched now
        derive_edges(state, np.array(state.passage_alive, dtype=bool), node_rows, state.synonyms.edges())
    walk_writers, walk = walk_files(state, node_rows)
    meta = {
        "format": FORMAT,
        "generation": generation,
        "dim": state.vectors["phrase"].dim,
        "passage_ids": [p.id for p in state.passages],
        "passage_hashes": [p.content_hash for p in state.passages],
        "dead": [[i, _passage_fields(p)] for i, (p, a) in enumerate(zip(state.passages, state.passage_alive)) if not a],
        "phrases": state.phrases,
        "relations": relations,
        "totals": state.totals(),
        "names": names,
        "counted": "counts" in name_arrays,
        "walk": walk,
        "narrowed": narrowed,
    }
    text = json.dumps(meta, ensure_ascii=False).encode("utf-8")
    out: dict[str, Writer] = {"state.json": lambda h: h.write(text)}
    for name, array in arrays.items():
        out[f"state-{name}.npy"] = array_writer(array)
    return out | walk_writers


def restore_state(
    root: Path,
    generation: int,
    stored: Callable[[], Sequence[PassageRow]],
    dim: int,
    config: GraphConfig,
    precision: str = "float32",
) -> tuple[IndexState, str] | None:
    """(the state saved with snapshot `generation`, with its synonym lists; the checksum of its `state.json`,
    which names this saved state), or None when there is none usable:
    not written, another format, damaged (logged), not the stored passages (logged) or its phrase and fact
    vectors not stored in the memory's `precision` (logged). `stored` reads the stored passages (called while the
    vector files' checksums are computed on a thread)."""
    found = verified_files(root, generation, TABLES, OPTIONAL)
    if found is None:
        return None
    folder, sums = found
    # the vector files are checked on a thread while the tables are read (gigabytes at 100k)
    vectors = PendingCheck(folder, sums, [n for names in _vector_files(sums).values() for n in names])
    try:
        with collector_paused(collect_first=True):
            state = _restore(folder, sums, generation, stored(), dim, config, precision)
    except BaseException:
        vectors.cancel()
        raise
    if state is None or not vectors.passed():
        vectors.cancel()
        if state is not None and state.caches.base_check is not None:
            state.caches.base_check.cancel()
        return None
    return state, sums["state.json"]


def _vector_files(sums: dict[str, str]) -> dict[str, list[str]]:
    """Each role's vector files (its parts, engram.store.snapshot_parts), by the snapshot's checksums."""
    return {role: part_names(sums, role) or [f"{role}.npy"] for role in ROLES}


def _restore(
    folder: Path,
    sums: dict[str, str],
    generation: int,
    stored: Sequence[PassageRow],
    dim: int,
    config: GraphConfig,
    precision: str,
) -> IndexState | None:
    """The state saved in `folder` (its tables verified; the vectors are mapped, not read), or None."""
    try:
        meta = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        if meta.get("format") not in READ_FORMATS or meta.get("generation") != generation or meta.get("dim") != dim:
            return None
        present = [a for a in KEY_TABLES if f"state-{a}.npy" in sums]
        arrays = {a: np.load(folder / f"state-{a}.npy", allow_pickle=False) for a in [*ARRAYS, *present]}
        for name in [n for n in meta.get("narrowed", []) if n in arrays]:  # saved as int32: back to int64
            if arrays[name].dtype != np.int32:
                raise ValueError(f"state-{name}.npy is not the int32 table its state.json says")
            arrays[name] = arrays[name].astype(np.int64)
        state = IndexState(dim, config, precision)
        _fill_passages(state, meta, arrays, stored)
        relations = _fill_phrases_and_facts(state, meta, arrays)
        _fill_vectors(state, folder, sums, dim)
        _fill_orders(state, arrays)
        names = {"offsets": arrays["names_offsets"], "words": arrays["names_words"]}
        names |= {k: arrays[f"names_{k}"] for k in ("word_hashes", "word_rows") if f"names_{k}" in arrays}
        if meta["counted"]:
            names["counts"] = arrays["names_counts"]
        state.names.restore(meta["names"], names)
        state.restored(meta["totals"], relations)
        synonyms = {k: arrays[f"synonym_{k}"] for k in ("rows", "offsets", "neighbours", "sims")}
        state.synonyms.restore(synonyms, state.phrases)
        restore_walk(state, folder, sums, meta.get("walk"))
        return state
    except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError) as exc:
        log.warning("saved state in %s is not used (%s): it is rebuilt from the records", folder, exc)
        return None


def _fits_int32(array: Array) -> bool:
    """Whether an int64 table's values all fit int32 (it is then saved as int32: half the bytes)."""
    if array.dtype != np.int64:
        return False
    return not array.size or (int(array.min()) >= np.iinfo(np.int32).min and int(array.max()) <= np.iinfo(np.int32).max)


def _fill_passages(
    state: IndexState, meta: dict[str, Any], arrays: dict[str, Array], stored: Sequence[PassageRow]
) -> None:
    ids, hashes, alive = meta["passage_ids"], meta["passage_hashes"], arrays["passage_alive"].tolist()
    if not len(ids) == len(hashes) == len(alive):
        raise ValueError("passage tables disagree")
    by_id = {p.id: p for p in stored}
    dead = {int(i): fields for i, fields in meta["dead"]}
    for row, (pid, digest, living) in enumerate(zip(ids, hashes, alive)):
        passage = by_id.pop(pid, None) if living else PassageRow(**dead[row])
        if passage is None or passage.content_hash != digest or passage.id != pid:
            raise ValueError(f"passage {pid} is not stored as saved")
        state.passages.append(passage)
        state.passage_row[pid] = row
        state.hash_rows.setdefault(digest, set()).add(row)
    if by_id:
        raise ValueError(f"{len(by_id)} stored passages are not in it")
    state.passage_alive.extend(bool(a) for a in alive)
    state.passage_status.extend(STATUS[s] for s in arrays["passage_status"].tolist())
    state.passage_dropped.extend(arrays["passage_dropped"].tolist())
    state.passage_facts.restore(arrays["facts_offsets"], arrays["facts_rows"])
    context = arrays["context_rows"].astype(np.int64)
    state.passage_context.extend(context[a:b] for a, b in itertools.pairwise(arrays["context_offsets"].tolist()))
    if not len(state.passage_status) == len(state.passage_facts) == len(state.passage_context) == len(ids):
        raise ValueError("passage tables disagree")


def _fill_phrases_and_facts(state: IndexState, meta: dict[str, Any], arrays: dict[str, Array]) -> list[str]:
    """Fill the phrase and fact tables; returns the relation strings (the objects the facts hold)."""
    phrases, relations = list(map(str, meta["phrases"])), list(map(str, meta["relations"]))
    state.phrases.extend(phrases)  # in place: the name table and the orders share these
    saved = (arrays["phrase_hashes"], arrays["phrase_rows"]) if "phrase_hashes" in arrays else None
    state.phrase_row.restore(len(phrases), saved)  # without a saved table (an older state) it is made now
    state.phrase_refs.extend(arrays["phrase_refs"].tolist())
    pairs = arrays["fact_phrases"].reshape(-1, 2)
    facts = state.facts
    facts.restore(state.phrases, relations, pairs, arrays["fact_relation"])  # tuples made when read
    count = len(pairs)
    state.fact_row.restore(state.phrases, state.phrase_row, relations, pairs, arrays["fact_relation"])
    state.fact_phrases.restore(pairs)
    state.fact_support.extend(arrays["fact_support"].tolist())
    state.relation.restore(arrays["relation_pairs"].reshape(-1, 2), arrays["relation_counts"])
    counts = (len(state.phrase_refs), len(state.phrase_row), len(state.fact_support), len(state.fact_phrases))
    if counts != (len(phrases), len(phrases), count, count):
        raise ValueError("phrase or fact tables disagree")
    return relations


def _fill_vectors(state: IndexState, folder: Path, sums: dict[str, str], dim: int) -> None:
    sizes = {"passage": len(state.passages), "phrase": len(state.phrases), "fact": len(state.facts)}
    for role, names in _vector_files(sums).items():
        parts = [np.load(folder / name, mmap_mode="c", allow_pickle=False) for name in names]
        want = state.vectors[role].dtype
        if any(m.dtype != want for m in parts):
            raise ValueError(f"{role} vectors are stored as {parts[0].dtype}, not as the memory's {want}")
        if any(m.ndim != 2 or m.shape[1] != state.vectors[role].width for m in parts):
            raise ValueError(f"{role} vectors do not fit the saved rows")
        if sum(len(m) for m in parts) != sizes[role]:
            raise ValueError(f"{role} vectors do not fit the saved rows")
        state.vectors[role].adopt_parts([(m, _saved(folder, sums, role, i)) for i, m in enumerate(parts)])


def _saved(folder: Path, sums: dict[str, str], role: str, index: int) -> SavedPart | None:
    """Part `index` of `role` as a file the next snapshot may link (None when it has no keys file of its own: a
    snapshot written before parts, whose `keys.json` holds every role's keys)."""
    names = (part_name(role, index), listed_key_name(sums, role, index))
    if not all(n in sums for n in names):
        return None
    return SavedPart(*(SavedFile.of(folder / n, sums[n]) for n in names))


def _fill_orders(state: IndexState, arrays: dict[str, Array]) -> None:
    passages, phrases, facts = state.passages, state.phrases, state.facts
    state.passage_order.restore(arrays["order_passage"], lambda r: passages[r].id)
    state.phrase_order.restore(arrays["order_phrase"], phrases.__getitem__)
    # a few changes read the keys they pass in a binary search; many make the saved facts' tuples at once
    state.fact_order.restore(arrays["order_fact"], facts.__getitem__, lambda rows: _items(facts.saved(), facts, rows))


def _items(saved: Sequence[T], table: Sequence[T], rows: list[int]) -> list[T]:
    """The entries of `rows`: from the saved tuples, or from `table` for rows appended since (a few changes
    insert such rows into a restored order before its keys are made)."""
    count = len(saved)
    return [saved[r] if r < count else table[r] for r in rows]
