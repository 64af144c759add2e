"""engram: long-term, non-parametric memory for LLMs (HippoRAG 2)."""

from engram.config import GraphConfig, MemoryConfig, RetrieveConfig
from engram.errors import (
    EmbedderMismatchError,
    EngramError,
    InputError,
    LLMConfigError,
    LLMError,
    MemoryFormatError,
    MissingDependencyError,
)
from engram.memory import Memory
from engram.text import ChunkConfig
from engram.types import Answer, Document, Extraction, Fact, IndexReport, Passage, Retrieval, RetrievedPassage, Seed

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "ChunkConfig",
    "Document",
    "EmbedderMismatchError",
    "EngramError",
    "Extraction",
    "Fact",
    "GraphConfig",
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
