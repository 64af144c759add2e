"""The read-only view retrieval runs on (`GraphIndex`, `graph_index`), derived from the state after every
commit: its edge arrays, built or patched (`edges`, `csr_assembly`, `node_maps`, `saved_walk`), its BM25 index
(`bm25`), and what `Memory.neighbourhood` and `Memory.graph` copy out of it (`neighbourhood`, `graph_snapshot`).
Imports engram.index.state only."""
