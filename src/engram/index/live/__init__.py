"""The live index of an open memory (`LiveIndex`, `live_index`): loading the state from the records (`load`),
refreshing it after other processes' commits (`refresh`), the write path (`writer`, `store_writes`) and its
retries after a lost race (`retry`). The top of engram.index: imports its other subpackages."""
