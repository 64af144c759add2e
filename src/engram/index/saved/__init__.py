"""What is kept on disk beside the vector snapshot so that opening a memory rebuilds nothing: the live state
(`state_file`), the phrase ANN index (`ann_cache`) and the fact vectors' 8-bit codes (`codes_cache`). Imports
engram.index.state and engram.index.view."""
