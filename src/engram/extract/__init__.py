"""Open information extraction: named entities and triples from passages, through a chat model."""

from engram.extract.openie import ExtractionOutcome, extract_many, extract_passage

__all__ = ["ExtractionOutcome", "extract_many", "extract_passage"]
