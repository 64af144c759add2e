"""Building the configured chat model from flags, the environment and the config files.

Each setting is read from, in order: the explicit value (a CLI flag), the environment variable, the "llm"
section of the config files (`engram.settings.llm_config_section`: a memory's config.json names no endpoint or
key variable unless trusted). Unknown config keys are an error, naming the known ones. A base URL without a
model is an `LLMConfigError`; a model without a base URL means api.openai.com (which needs OPENAI_API_KEY).

| setting | environment | config.json "llm" key |
| --- | --- | --- |
| base URL (ends in /v1) | ENGRAM_LLM_BASE_URL | base_url |
| model | ENGRAM_LLM_MODEL | model |
| provider: "openai" (any OpenAI-compatible server) or "litellm" | ENGRAM_LLM_PROVIDER | provider |
| API key (not needed for a local server) | OPENAI_API_KEY, or the variable named by api_key_env | api_key_env |
| request timeout, seconds | ENGRAM_LLM_TIMEOUT | timeout |
| most requests in flight | ENGRAM_LLM_CONCURRENCY | max_concurrency |
| requests per minute | ENGRAM_LLM_RPM | requests_per_minute |
| tokens per minute | ENGRAM_LLM_TPM | tokens_per_minute |
| temperature (default 0) | ENGRAM_LLM_TEMPERATURE | temperature |
| seed | ENGRAM_LLM_SEED | seed |
| max output tokens per reply | ENGRAM_LLM_MAX_OUTPUT_TOKENS | max_tokens |
| retries after a failed attempt | ENGRAM_LLM_MAX_RETRIES | max_retries |
| JSON output: json_object, json_schema or none | ENGRAM_LLM_RESPONSE_FORMAT | response_format |
| attempts in a row without an answer that stop a run (0: never) | ENGRAM_LLM_GIVE_UP_AFTER | give_up_after |
| request timeout at query time (default: the timeout, at most 15 s) | ENGRAM_LLM_QUERY_TIMEOUT | query_timeout |
| retries at query time (default 1) | ENGRAM_LLM_QUERY_MAX_RETRIES | query_max_retries |
| stop a streamed JSON reply that repeats itself: 1 or 0 (0; `--llm local`: 1) | ENGRAM_LLM_STOP_LOOPS | stop_loops |
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from engram.errors import InputError, LLMConfigError
from engram.llm.base import ChatModel

# key -> (environment variable, parser)
_NUMERIC: dict[str, tuple[str, Callable[[str], Any]]] = {
    "timeout": ("ENGRAM_LLM_TIMEOUT", float),
    "max_concurrency": ("ENGRAM_LLM_CONCURRENCY", int),
    "requests_per_minute": ("ENGRAM_LLM_RPM", float),
    "tokens_per_minute": ("ENGRAM_LLM_TPM", float),
    "temperature": ("ENGRAM_LLM_TEMPERATURE", float),
    "seed": ("ENGRAM_LLM_SEED", int),
    "max_tokens": ("ENGRAM_LLM_MAX_OUTPUT_TOKENS", int),
    "max_retries": ("ENGRAM_LLM_MAX_RETRIES", int),
    "give_up_after": ("ENGRAM_LLM_GIVE_UP_AFTER", int),
    "query_timeout": ("ENGRAM_LLM_QUERY_TIMEOUT", float),
    "query_max_retries": ("ENGRAM_LLM_QUERY_MAX_RETRIES", int),
    "stop_loops": ("ENGRAM_LLM_STOP_LOOPS", lambda raw: _switch(raw)),
}
_TEXT = {
    "base_url": "ENGRAM_LLM_BASE_URL",
    "model": "ENGRAM_LLM_MODEL",
    "provider": "ENGRAM_LLM_PROVIDER",
    "response_format": "ENGRAM_LLM_RESPONSE_FORMAT",
}
KNOWN_KEYS = frozenset({*_NUMERIC, *_TEXT, "api_key_env"})
PROVIDERS = ("openai", "litellm")


def _switch(raw: str) -> bool:
    """1/true/yes/on or 0/false/no/off; anything else is a ValueError (reported with the setting's name)."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def llm_settings(
    section: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    **explicit: Any,
) -> dict[str, Any]:
    """The merged settings (explicit values that are not None win, then the environment, then `section`)."""
    section = dict(section or {})
    unknown = set(section) - KNOWN_KEYS
    if unknown:
        raise InputError(f"unknown llm settings {sorted(unknown)} in config.json; known: {sorted(KNOWN_KEYS)}")
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    for key, name in _TEXT.items():
        value = explicit.get(key) or env.get(name, "").strip() or section.get(key)
        if value:
            merged[key] = str(value)
    for key, (name, parse) in _NUMERIC.items():
        raw = explicit.get(key)
        if raw is None:
            raw = env.get(name, "").strip() or section.get(key)
        if raw is None or raw == "":
            continue
        try:
            merged[key] = parse(raw) if isinstance(raw, str) else raw
        except ValueError as error:
            kind = "1 or 0" if key == "stop_loops" else "a number"
            raise InputError(f"{name} (llm setting {key!r}) must be {kind}, not {raw!r}") from error
    key_env = str(section.get("api_key_env") or "OPENAI_API_KEY")
    api_key = explicit.get("api_key") or env.get(key_env, "").strip()
    if api_key:
        merged["api_key"] = api_key
    return merged


def make_chat(settings: Mapping[str, Any]) -> ChatModel | None:
    """The chat model `settings` (from `llm_settings`) describe, or None when no model is set."""
    options = dict(settings)
    provider = options.pop("provider", "openai")
    model = options.pop("model", None)
    if not model:
        if options.get("base_url"):
            from engram.llm.failures import public_url

            raise LLMConfigError(
                f"an LLM base URL is set ({public_url(str(options['base_url']))}) but no model: set "
                "ENGRAM_LLM_MODEL (or --llm-model, or \"model\" in the config file) to a model the server serves "
                "(GET /v1/models lists them)"
            )
        return None
    if provider not in PROVIDERS:
        raise InputError(f"unknown LLM provider {provider!r}: use one of {list(PROVIDERS)}")
    if provider == "litellm":
        from engram.llm.litellm_chat import LiteLLMChat

        return LiteLLMChat(model, **options)
    from engram.llm.openai_chat import OpenAIChat

    return OpenAIChat(model, **options)
