"""Refreshing a process's live state after other processes' commits by replaying what they changed (the store's
commit log: `Store.changes_since`, docs/format.md) instead of reloading every record.

Each commit logs a `Change`: the passages it removed and added (by id), the contents whose extraction it applied
(by content hash), and the phrases whose synonym lists changed. A process at generation g that finds generation
g' replays the changes of g+1..g' as one net change: every logged passage alive here is removed, every logged
passage still stored is added back as it is stored now, the extractions of the logged contents and of the added
passages are applied as stored now, and the logged phrases' synonym lists are read from the store (not searched
again: the committing process searched them, with its ANN index where it has one). Passages, extractions and
lists are the store's latest, so the state is the one a reload builds, and the next view is patched from the last
one as after a local change. One difference, by design: extraction rows that a run stored without committing
them (an interrupted `extract`) are applied by a reload, not by a replay (nor by the process that stored them).

A log entry that cannot be read, or lists that name a phrase not alive here, raise `StaleLog`: the caller then
reloads everything, as it does for a generation without an entry (a commit of an engram without the log, one
too large to log: `LOG_MAX_ITEMS`, or pruned).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram.index.live.load import VectorSource, fill_vectors
from engram.index.state.index_state import Changes, IndexState, passage_text
from engram.store.base import Store

FIELDS = ("removed", "added", "contents", "synonyms")
LOG_MAX_ITEMS = 1_000_000  # a change listing more is not logged (about 30 MB of JSON at 30 bytes an item)


class StaleLog(Exception):
    """The commit log does not describe the store's records: reload them instead."""


@dataclass(frozen=True)
class Change:
    """What one commit does to the live state, as the writer knows it before searching synonyms."""

    removed: Sequence[str] = ()  # passage ids
    added: Sequence[str] = ()  # passage ids
    contents: Sequence[str] = ()  # content hashes whose stored extraction the commit applied
    synonyms: Sequence[str] = ()  # phrases whose lists the commit changed (read back from the log)

    def logged(self, synonyms: Sequence[str]) -> str | None:
        """The log entry, with the phrases whose lists the commit's synonym search changed; None for a change of
        more than `LOG_MAX_ITEMS` ids, hashes and phrases together (a bulk load: the others reload instead of
        reading tens of megabytes of log)."""
        if len(self.removed) + len(self.added) + len(self.contents) + len(synonyms) > LOG_MAX_ITEMS:
            return None
        entry = {"removed": list(self.removed), "added": list(self.added), "contents": list(self.contents)}
        return json.dumps({**entry, "synonyms": sorted(synonyms)}, separators=(",", ":"))


def logged_between(rows: Sequence[tuple[int, str]], generation: int, latest: int) -> list[str] | None:
    """The changes of generations `generation` + 1 .. `latest` from the log's rows, or None when any is missing."""
    if [g for g, _ in rows] != list(range(generation + 1, latest + 1)):
        return None
    return [change for _, change in rows]


def parse(text: str) -> Change:
    """A log entry read back (StaleLog when it is not one)."""
    try:
        entry: Any = json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StaleLog(f"unreadable log entry ({exc})") from exc
    if not isinstance(entry, dict) or not all(
        isinstance(entry.get(k), list) and all(isinstance(v, str) for v in entry[k]) for k in FIELDS
    ):
        raise StaleLog("a log entry without its lists of strings")
    return Change(entry["removed"], entry["added"], entry["contents"], entry["synonyms"])


def replay(state: IndexState, store: Store, source: VectorSource, entries: Sequence[str]) -> None:
    """Apply the logged changes `entries` (oldest first) to `state` as one net change (module docstring)."""
    changes = [parse(text) for text in entries]
    ids = sorted({i for c in changes for i in (*c.removed, *c.added)}, key=lambda i: i.encode("utf-8"))
    stored = store.passages_by_id(ids)
    for pid in ids:
        at = state.passage_row.get(pid)
        if at is not None and state.passage_alive[at]:
            state.remove_passage(pid)
    vectors = source.get("passage", [passage_text(p) for p in stored])
    for passage, vector in zip(stored, vectors):
        state.add_passage(passage, vector)
    contents = sorted({*(h for c in changes for h in c.contents), *(p.content_hash for p in stored)})
    for digest, found in store.extractions_for(contents).items():
        if not found.linked:  # stored since by a run not committed yet: a load keeps such passages pending
            if any(state.passage_status[i] != "pending" for i in state.alive_with_content(digest)):
                raise StaleLog(f"the extraction of {digest} was rewritten after its commit")
            continue
        for i in state.alive_with_content(digest):
            state.set_triples(i, found.status, found.triples if found.status == "done" else [])
    fill_vectors(state, source)
    _replace_lists(state, store, sorted({k for c in changes for k in c.synonyms}))
    state.changes = Changes()  # births and deaths are in the lists read: no search for them


def _replace_lists(state: IndexState, store: Store, phrases: list[str]) -> None:
    """The stored lists of `phrases` (each alive here, or dead with no list) in place of this state's."""
    lists = store.synonym_lists_for(phrases)
    where, alive = state.phrase_row, state.phrase_alive_mask()
    rows: dict[int, list[tuple[float, str, int]]] = {}
    for phrase in phrases:
        row = where.get(phrase)
        items = lists.get(phrase, [])
        if row is None or not alive[row]:
            if items:
                raise StaleLog(f"phrase {phrase!r} has a stored list but is not alive here")
            if row is not None:
                rows[row] = []  # died: its edges go
            continue
        neighbours = []
        for name, sim in items:
            other = where.get(name)
            if other is None or not alive[other]:
                raise StaleLog(f"the stored list of {phrase!r} names {name!r}, not alive here")
            neighbours.append((sim, name, other))
        rows[row] = neighbours
    state.synonyms.replace(rows)
