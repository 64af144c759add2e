"""Where settings come from: explicit arguments (CLI flags) first, then the environment, then the memory's
config file (`config.json` in the memory directory), then defaults.

config.json (all keys optional):
{"embedder": "minilm",
 "llm": {"base_url": "http://localhost:8000/v1", "model": "...", "api_key_env": "OPENAI_API_KEY"},
 "chunk": {"max_words": 200, "overlap": 30},
 "graph": {"synonym_threshold": 0.8, "synonym_top_k": 100},
 "retrieve": {"passage_weight": 0.05, "damping": 0.5, "node_specificity": false}}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from engram.config import MemoryConfig
from engram.embed.base import Embedder
from engram.errors import InputError
from engram.llm.base import ChatModel

CONFIG_FILE = "config.json"


def read_config_file(memory_dir: Path) -> dict[str, Any]:
    path = memory_dir / CONFIG_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a JSON object")
    return data


def load_file_config(memory_dir: Path) -> MemoryConfig:
    return MemoryConfig.from_dict(read_config_file(memory_dir))


def resolve_embedder(embedder: Embedder | str | None, memory_dir: Path | None = None) -> Embedder:
    """An Embedder object is used as given; a spec string goes to `make_embedder`; None means $ENGRAM_EMBEDDER,
    then the config file's "embedder", then the default all-MiniLM-L6-v2."""
    if embedder is not None and not isinstance(embedder, str):
        return embedder
    from engram.embed import make_embedder

    spec = embedder or os.environ.get("ENGRAM_EMBEDDER")
    if not spec and memory_dir is not None:
        spec = read_config_file(memory_dir).get("embedder")
    return make_embedder(spec or None)


def resolve_llm(
    memory_dir: Path | None = None,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    **options: Any,
) -> ChatModel | None:
    """The configured chat model, or None when no model is configured anywhere. `options` are further
    explicit settings (e.g. max_concurrency); every setting and its variable: `engram.llm.factory`."""
    from engram.llm.factory import llm_settings, make_chat

    section = read_config_file(memory_dir).get("llm", {}) if memory_dir is not None else {}
    return make_chat(llm_settings(section, base_url=base_url, model=model, api_key=api_key, **options))
