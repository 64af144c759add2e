"""`graphrag-local`: GraphRAG's local search as a peer method (`method`, the one `PEERS` names), its index
(`index`, `graph`, `leiden`, `prompts`), its query (`query`, `context`) and its cost estimate (`estimate`)."""
