"""The library's error hierarchy. The CLI turns these into messages and exit codes."""

from __future__ import annotations


class EngramError(Exception):
    """Base class of every error engram raises on purpose."""


class InputError(EngramError, ValueError):
    """Bad input from the caller: the message says what to change."""


class MemoryFormatError(EngramError):
    """The memory directory cannot be opened as it is (unknown format version, damaged manifest)."""


class ConflictError(EngramError):
    """Another writer committed to the memory while this change was being prepared: nothing was written;
    run the change again (it will be prepared against the newer state)."""


class EmbedderMismatchError(EngramError):
    """The memory was written with another embedder than the one configured."""


class LLMError(EngramError):
    """An LLM call failed for good (after retries), or no LLM is configured where one is needed."""


class LLMConfigError(LLMError):
    """The LLM endpoint refused the request in a way retrying cannot fix (bad URL, key or model)."""


class ExtractionError(EngramError):
    """An extraction could not be parsed or validated."""


class MissingDependencyError(EngramError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


# How to configure an LLM, for messages that need one: the same words reach library and CLI users.
LLM_HINT = (
    "set ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL (CLI: --llm-base-url and --llm-model; library: Memory(llm=...))"
)
