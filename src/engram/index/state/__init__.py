"""The live state (`IndexState`, `index_state`) and the tables it is made of: vector rows and canonical key
orders (`rows`, `mapped_rows`), key lookups (`key_rows`, `fact_pair_keys`), query-linking names (`phrase_names`),
a restored state's saved per-row tables (`saved_tables`), 8-bit fact codes (`coded_rows`), and what a patch of
the next view needs (`patch_base`, `spare_arrays`). Imports nothing else from engram.index."""
