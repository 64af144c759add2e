"""Which of the query's linked phrase names the query writes as a name.

A question names its entities the way text does, with a capital or a digit ("David Jones", "26th Chess
Olympiad", "1920 Summer Olympics"), while its lower-case words are its structure ("city", "sport",
"location", "international"). Those structure words are phrase nodes too, each often in one passage only, so
linking them seeds passages that merely use the word (a question on David Jones's "sport" seeded a passage on
Digimon). HippoRAG 1 links the query's named entities for this reason; this keeps its idea without a tagger:
a linked name is kept when one of its words is written in the query with a capital or a digit.

A query written all in one case ("who founded acme", "WHO FOUNDED ACME") carries no such signal; all its
linked names are kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engram.retrieve.links import fold

_WORD = re.compile(r"\w+")


def written_as_names(query: str) -> set[str] | None:
    """The folded words the query writes with a capital or a digit first; None when its letters are all in
    one case (no signal)."""
    letters = [c for c in query if c.isalpha() and c.lower() != c.upper()]
    if not letters or all(c.islower() for c in letters) or all(c.isupper() for c in letters):
        return None
    out: set[str] = set()
    for token in _WORD.findall(query):
        if token[0].isupper() or token[0].isdigit():
            out.update(fold(token).split())
    return out


def named_only(query: str, names: Sequence[str]) -> list[str]:
    """The linked (folded) `names` with at least one word the query writes as a name; all of them when the
    query carries no case signal."""
    marked = written_as_names(query)
    if marked is None:
        return list(names)
    return [name for name in names if any(word in marked for word in name.split())]
