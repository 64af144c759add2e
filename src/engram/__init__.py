"""engram: long-term, non-parametric memory for LLMs (HippoRAG 2).

`import engram` loads only the public values and errors; `engram.Memory` (numpy, scipy and the rooms below it)
is imported on first use, so a CLI's `--help` or a server's start-up pays for what it uses."""

from typing import TYPE_CHECKING

from engram.config import GraphConfig, MemoryConfig, RetrieveConfig
from engram.errors import (
    ConflictError,
    EmbedderMismatchError,
    EngramError,
    InputError,
    LLMConfigError,
    LLMError,
    MemoryFormatError,
    MissingDependencyError,
)
from engram.text import ChunkConfig
from engram.types import (
    Answer,
    Document,
    Extraction,
    Fact,
    GraphSnapshot,
    IndexReport,
    Passage,
    Retrieval,
    RetrievedPassage,
    Seed,
)

if TYPE_CHECKING:
    from engram.memory import Memory

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "ChunkConfig",
    "ConflictError",
    "Document",
    "EmbedderMismatchError",
    "EngramError",
    "Extraction",
    "Fact",
    "GraphConfig",
    "GraphSnapshot",
    "IndexReport",
    "InputError",
    "LLMConfigError",
    "LLMError",
    "Memory",
    "MemoryConfig",
    "MemoryFormatError",
    "MissingDependencyError",
    "Passage",
    "Retrieval",
    "RetrieveConfig",
    "RetrievedPassage",
    "Seed",
    "__version__",
]


def __getattr__(name: str) -> object:
    if name == "Memory":
        from engram.memory import Memory

        return Memory
    raise AttributeError(f"module 'engram' has no attribute {name!r}")
