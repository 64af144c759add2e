"""The live state (`IndexState`, `index_state`) and the tables it is made of: vector rows and canonical key
orders (`rows`, `mapped_rows`), key lookups (`key_rows`, `fact_pair_keys`), query-linking names (`phrase_names`),
a restored state's saved per-row tables (`saved_tables`), and the caches that only make the next view faster to
derive, behind one object (`state_caches`: the patch base and what changed since, `patch_base`; spare memory,
`spare_arrays`; 8-bit fact codes, `coded_rows`). Imports nothing else from engram.index."""
