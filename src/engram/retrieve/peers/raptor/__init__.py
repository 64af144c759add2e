"""`raptor`: RAPTOR as a peer method (`method`, the one `PEERS` names), its tree (`tree`, `cluster`, `place`,
`prompts`) and its collapsed-tree query (`query`)."""
