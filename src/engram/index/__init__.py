"""The live index: graph state as flat arrays, commits that change it, and read-only views for retrieval."""
