"""The live index: graph state as flat arrays, commits that change it, and read-only views for retrieval.

Four subpackages, each importing only those before it (tests/test_house.py checks it): `state` (the live state
and the tables it is made of), `view` (the read view derived from it after every commit), `saved` (what is kept
beside the vector snapshot), `live` (the open memory's live index: load, refresh, write)."""
