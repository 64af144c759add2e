"""BM25 over passage texts: Lucene's Okapi BM25 as bm25s scores it (k1 1.5, b 0.75, bm25s's tokens: lower case,
words of two or more letters or digits, English stopwords), kept as one sparse matrix of per-(passage, term)
scores so that a query sums a few columns.

The index of the next view is built from the token ids of the last one's passages (`BM25Index(...,
previous=...)`): only new or changed passages are tokenised, and the matrix is rebuilt by array operations.
bm25s rebuilds its whole index from the texts, which took a minute at 100,000 passages; the default method
asks for BM25 scores after every write, so that cost would land on the first query after each one."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from engram.errors import MissingDependencyError

K1 = 1.5
B = 0.75
_WORD = re.compile(r"(?u)\b\w\w+\b")  # bm25s's (and scikit-learn's) token pattern


def _stopwords() -> frozenset[str]:
    try:
        from bm25s.stopwords import STOPWORDS_EN
    except ImportError as exc:  # pragma: no cover - bm25s is a core dependency
        raise MissingDependencyError("BM25 needs bm25s: pip install bm25s") from exc
    return frozenset(STOPWORDS_EN)


def tokens(text: str, stopwords: frozenset[str]) -> list[str]:
    """The words BM25 counts in `text`: bm25s's tokenisation with English stopwords."""
    return [w for w in _WORD.findall(text.lower()) if w not in stopwords]


class BM25Index:
    """BM25 scores of the texts whose `alive` flag is set (all by default); dead rows score -inf.

    Parameters
    ----------
    texts : the passages' texts, one per row.
    alive : which rows are live passages (the others are never scored and count in no statistic).
    keys : one key per row (passage ids); with `previous`, a row whose key and text it holds reuses its tokens.
    previous : the index of an earlier view of the same memory.
    """

    def __init__(
        self,
        texts: Sequence[str],
        alive: npt.ArrayLike | None = None,
        keys: Sequence[str] | None = None,
        previous: BM25Index | None = None,
    ) -> None:
        self.size = len(texts)
        mask = np.ones(self.size, dtype=bool) if alive is None else np.asarray(alive, dtype=bool)
        self._rows = np.flatnonzero(mask)
        self._stop: frozenset[str] = previous._stop if previous is not None else _stopwords()
        # the vocabulary only grows; an earlier view's matrix ignores the ids it has no column for
        self._vocab: dict[str, int] = previous._vocab if previous is not None else {}
        known = previous._cache if previous is not None and keys is not None else {}
        self._cache: dict[str, tuple[str, npt.NDArray[np.int64]]] = {}
        ids: list[npt.NDArray[np.int64]] = []
        for row in self._rows.tolist():
            text = texts[row]
            key = keys[row] if keys is not None else None
            hit = known.get(key) if key is not None else None
            if hit is not None and hit[0] == text:
                term_ids = hit[1]
            else:
                vocab = self._vocab
                term_ids = np.fromiter(
                    (vocab.setdefault(w, len(vocab)) for w in tokens(text, self._stop)), dtype=np.int64
                )
            if key is not None:
                self._cache[key] = (text, term_ids)
            ids.append(term_ids)
        self._columns = len(self._vocab)
        self._matrix = _score_matrix(self._rows, ids, self.size, self._columns)

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """One BM25 score per passage, in index order (a query word counts as often as the query says it)."""
        out = np.full(self.size, -np.inf)
        if len(self._rows) == 0:
            return out
        out[self._rows] = 0.0
        # the query's terms summed in the order of their words, not of their ids (which depend on the order
        # the passages came in): a memory built in steps scores exactly as one built at once
        said = Counter(tokens(query, self._stop))
        words = sorted(said)
        columns = np.array([self._vocab.get(w, -1) for w in words], np.int64)
        counts = np.array([said[w] for w in words], np.int64)
        known = (columns >= 0) & (columns < self._columns)
        columns, counts = columns[known], counts[known]
        if len(columns):
            summed = self._matrix[:, columns] @ counts.astype(np.float64)
            out[self._rows] = summed[self._rows]
        return out


def _score_matrix(
    rows: npt.NDArray[np.int64], ids: list[npt.NDArray[np.int64]], size: int, columns: int
) -> sp.csc_matrix:
    """(passages x terms) BM25 term scores, by column: idf x tf / (tf + k1 (1 - b + b dl / avgdl)), with Lucene's
    idf ln(1 + (N - df + 0.5) / (df + 0.5)) over the live rows."""
    lengths = np.array([len(a) for a in ids], dtype=np.int64)
    if not len(rows) or not lengths.sum():
        return sp.csc_matrix((size, columns), dtype=np.float64)
    counts = sp.coo_matrix(
        (np.ones(int(lengths.sum())), (np.repeat(rows, lengths), np.concatenate(ids))), shape=(size, columns)
    ).tocsc()
    counts.sum_duplicates()
    doc_length = np.zeros(size, dtype=np.float64)
    doc_length[rows] = lengths
    average = float(lengths.mean())
    df = np.diff(counts.indptr).astype(np.float64)
    idf = np.log(1.0 + (len(rows) - df + 0.5) / (df + 0.5))
    tf = counts.data
    norm = K1 * (1.0 - B + B * doc_length[counts.indices] / average)
    counts.data = np.repeat(idf, np.diff(counts.indptr)) * tf / (tf + norm)
    return counts
