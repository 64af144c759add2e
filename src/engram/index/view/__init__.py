"""The read-only view retrieval runs on (`GraphIndex`, `graph_index`), derived from the state after every
commit: its edge arrays, built or patched (`edges`, `csr_assembly`, `node_maps`, `saved_walk`), its BM25 index
(`bm25`) and `Memory.neighbourhood`'s picture of it (`neighbourhood`). Imports engram.index.state only."""
