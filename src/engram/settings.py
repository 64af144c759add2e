"""Where settings come from: explicit arguments (CLI flags) first, then the environment, then the memory's
config file (`config.json` in the memory directory), then the user's config file
(`$XDG_CONFIG_HOME/engram/config.json`, by default `~/.config/engram/config.json`; `$ENGRAM_CONFIG` names
another), then defaults. The library (`Memory(path)`) and the CLI resolve the LLM the same way (`resolve_llm`).

config.json (all keys optional):
{"embedder": "minilm",
 "llm": {"base_url": "http://localhost:8000/v1", "model": "...", "api_key_env": "OPENAI_API_KEY"},
 "chunk": {"max_words": 200, "overlap": 30},
 "graph": {"synonym_threshold": 0.8, "synonym_top_k": 100},
 "retrieve": {"passage_weight": 0.05, "damping": 0.5, "node_specificity": false}}

A memory is data, and may come from someone else: its config.json must not decide where requests go or which
secret they carry. So its `llm.base_url` and `llm.api_key_env` are ignored (and its `llm.model` with them,
since a model named for another server means nothing elsewhere) unless ENGRAM_TRUST_MEMORY_CONFIG=1. The
user's own config file and the environment are trusted.
"""
from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from engram.config import MemoryConfig
from engram.embed.base import Embedder
from engram.errors import InputError
from engram.llm.base import ChatModel
from engram.store.manifest import recorded_embedder
from engram.store.pg_schema import SCHEMES, is_database_url

CONFIG_FILE = "config.json"
TRUST_VARIABLE = "ENGRAM_TRUST_MEMORY_CONFIG"
UNTRUSTED_LLM_KEYS = ("base_url", "api_key_env")
logger = logging.getLogger(__name__)
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")  # "scheme://": a URL, not a directory name


def read_config_file(memory_dir: Path, name: str = CONFIG_FILE) -> dict[str, Any]:
    path = memory_dir / name
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, or bytes that are not UTF-8
        raise InputError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a JSON object")
    return data


def user_config_path() -> Path:
    """$ENGRAM_CONFIG, else $XDG_CONFIG_HOME/engram/config.json, else ~/.config/engram/config.json."""
    named = os.environ.get("ENGRAM_CONFIG", "").strip()
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path("~/.config").expanduser())
    return Path(base) / "engram" / CONFIG_FILE


def _llm_section(data: dict[str, Any], path: Path) -> dict[str, Any]:
    section = data.get("llm", {})
    if not isinstance(section, dict):
        raise InputError(f'{path}: "llm" must be a JSON object')
    return dict(section)


def trusts_memory_config() -> bool:
    return os.environ.get(TRUST_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def llm_config_section(memory_dir: Path | None) -> dict[str, Any]:
    """The "llm" settings of the config files: the memory's (endpoint and key variable only when trusted, see
    the module docstring) over the user's."""
    user_path = user_config_path()
    merged = _llm_section(read_config_file(user_path.parent, user_path.name), user_path)
    if memory_dir is None:
        return merged
    memory = _llm_section(read_config_file(memory_dir), memory_dir / CONFIG_FILE)
    ignored = [key for key in UNTRUSTED_LLM_KEYS if key in memory]
    if ignored and not trusts_memory_config():
        if "base_url" in memory:
            memory.pop("model", None)
            ignored.append("model")
        for key in ignored:
            memory.pop(key, None)
        logger.warning(
            "ignored llm %s in %s: endpoints and keys come from the environment or %s unless %s=1",
            "/".join(ignored), memory_dir / CONFIG_FILE, user_path, TRUST_VARIABLE,
        )
    return {**merged, **memory}


def load_file_config(memory_dir: Path) -> MemoryConfig:
    """The settings of the memory's config.json; a wrong one is refused naming the file to fix."""
    try:
        return MemoryConfig.from_dict(read_config_file(memory_dir))
    except InputError as exc:
        where = str(memory_dir / CONFIG_FILE)
        raise InputError(str(exc) if where in str(exc) else f"{where}: {exc}") from None


def resolve_embedder(embedder: Embedder | str | None, memory_dir: Path | None = None) -> Embedder:
    """An Embedder object is used as given; a spec string goes to `make_embedder`; None means $ENGRAM_EMBEDDER,
    then the config file's "embedder", then the embedder the memory at `memory_dir` was written with (its
    manifest), then the default all-MiniLM-L6-v2."""
    if embedder is not None and not isinstance(embedder, str):
        if not callable(getattr(embedder, "embed", None)) or not hasattr(embedder, "identity"):
            raise InputError(f"embedder takes a spec string or an Embedder object, not a {type(embedder).__name__}")
        return embedder
    from engram.embed import make_embedder

    return make_embedder(embedder_spec(embedder, memory_dir))


def embedder_spec(spec: str | None, memory_dir: Path | None) -> str | None:
    """The embedder spec in force for the memory at `memory_dir`: `spec`, else $ENGRAM_EMBEDDER, else its config
    file's "embedder", else the embedder its manifest records; None: the default (MiniLM)."""
    from engram.embed import spec_for

    chosen = spec or os.environ.get("ENGRAM_EMBEDDER")
    if not chosen and memory_dir is not None:
        chosen = read_config_file(memory_dir).get("embedder")
        recorded = None if chosen else recorded_embedder(memory_dir)
        chosen = chosen or (spec_for(recorded) if recorded is not None else None)
    return str(chosen) if chosen else None


def resolve_llm(
    memory_dir: Path | None = None,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    **options: Any,
) -> ChatModel | None:
    """The configured chat model, or None when no LLM is configured anywhere. `options` are further
    explicit settings (e.g. max_concurrency); every setting and its variable: `engram.llm.factory`. A half
    configuration (a base URL without a model) raises `LLMConfigError` naming what is missing."""
    from engram.llm.factory import llm_settings, make_chat

    section = llm_config_section(memory_dir)
    return make_chat(llm_settings(section, base_url=base_url, model=model, api_key=api_key, **options))


def check_target(target: object) -> None:
    """Refuse a URL of a store engram has no backend for: `Path("mysql://x/y")` would quietly make the
    directory mysql:/x/y. Callers that turn --memory into a Path call this first."""
    scheme = _URL_SCHEME.match(target) if isinstance(target, str) else None
    if scheme and not is_database_url(target):
        raise InputError(
            f"{scheme.group(1)}:// is not a store engram supports: give a directory, or a PostgreSQL URL "
            f"({' or '.join(SCHEMES)}...)"
        )


def checked_arguments(path: object, llm: object, config: object) -> MemoryConfig | None:
    """`Memory`'s `path`, `llm` and `config` checked for their kind (an error says what to pass); a `config`
    given as a dict, the shape of config.json, is read as one."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise InputError(f"a memory's path is a directory (str or Path) or a postgresql:// URL, not {path!r}")
    check_target(path)
    if llm is not None and llm is not False and not callable(getattr(llm, "complete", None)):
        raise InputError(
            f"llm takes a chat model (engram.llm), None (configured by the environment) or False, not {llm!r}; "
            "a model name goes to ENGRAM_LLM_MODEL, or to engram.llm.OpenAIChat(model=...)"
        )
    if isinstance(config, dict):
        return MemoryConfig.from_dict(config)
    if config is not None and not isinstance(config, MemoryConfig):
        raise InputError(f"config takes an engram.MemoryConfig or a dict like config.json, not {config!r}")
    return config
