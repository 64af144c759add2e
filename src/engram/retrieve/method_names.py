"""The names of the retrieval methods, and nothing else: a module that imports nothing, so the command line
can offer them as choices (`engram retrieve --method`, `engram eval --methods`) without loading numpy, scipy
or the methods themselves."""

from __future__ import annotations

HYBRID = "hybrid"  # dense cosine + BM25 (engram.retrieve.scoring.hybrid_scores)
VARIANTS = (
    "hipporag1",
    "hipporag2-ner-to-node",
    "hipporag2-query-to-node",
    "hipporag2-no-passage-nodes",
    "hipporag2-no-filter",
)
# methods that start from the query's named entities (an LLM or a query-entities file)
NEEDS_ENTITIES = ("hipporag1", "hipporag2-ner-to-node")
RSE_METHODS = ("rse-dense", "rse-hipporag2")  # relevant segment extraction over a base ranking (segments.py)
# the peer methods, in the order of engram.retrieve.peers.PEERS (which maps each to the module implementing it)
PEER_METHODS = ("lightrag", "lightrag-local", "lightrag-global", "graphrag-local", "raptor")
METHODS = ("hipporag2", "hipporag2-paper", "dense", "bm25", HYBRID, *VARIANTS, *RSE_METHODS, *PEER_METHODS)
