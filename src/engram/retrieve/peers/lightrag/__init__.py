"""`lightrag`: LightRAG as a peer method (`method`, the one `PEERS` names), its index (`index`, `update`, `rows`,
`prompts`) and its query (`query`). The chunk graphs it merges come from the shared `chunk_extract` and
`chunk_merge`."""
