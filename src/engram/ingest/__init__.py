"""Documents in: sources (files, folders, JSONL corpora), chunking into passages, ids and hashes, sync plans."""
