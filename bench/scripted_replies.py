"""Replies made from the prompts' text for the scripted OpenAI-compatible server (tests/fake_openai.py), per
prompt kind of every LLM-using method: OpenIE, the recognition filter, the reader, LightRAG (extraction,
gleaning, query keywords), GraphRAG (extraction, gleaning, description summaries, community reports) and RAPTOR
(cluster summaries). Capitalised words stand in for entities and are chained into relations; summaries and
reports are short texts built from the request. They exercise the pipelines, not the quality of an LLM: numbers
measured with them say what engram's own steps cost, never how well a method retrieves.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from engram.retrieve.peers.graphrag import prompts as graphrag_prompts
from engram.retrieve.peers.lightrag import prompts as lightrag_prompts
from engram.retrieve.peers.raptor import prompts as raptor_prompts
from fake_openai import last_user_text, openie_answer, task_of  # type: ignore[import-not-found]

NAME = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*")


def capitalised(text: str, limit: int = 12) -> list[str]:
    """The text's capitalised phrases, first occurrence first (stand-ins for named entities)."""
    return list(dict.fromkeys(NAME.findall(text)))[:limit]


def lightrag_answer(system: str, user: str) -> str | None:
    if system == lightrag_prompts.EXTRACT_SYSTEM and user == lightrag_prompts.GLEAN_REQUEST:
        return json.dumps({"entities": [], "relations": []})
    if system == lightrag_prompts.EXTRACT_SYSTEM:
        names = capitalised(user.split("Passage:\n", 1)[-1])
        entities = [{"name": n, "type": "other", "description": f"{n} is named in the passage."} for n in names]
        relations = [
            {"source": a, "target": b, "keywords": ["mentioned together"], "description": f"{a} and {b}", "strength": 5}
            for a, b in itertools.pairwise(names)
        ]
        return json.dumps({"entities": entities, "relations": relations})
    if system == lightrag_prompts.KEYWORDS_SYSTEM:
        question = user.removeprefix("Question: ")
        themes = [w for w in question.lower().split() if len(w) > 6][:3]
        return json.dumps({"high_level_keywords": themes, "low_level_keywords": capitalised(question)})
    return None


def graphrag_answer(system: str, user: str) -> str | None:
    if system == graphrag_prompts.EXTRACT_SYSTEM and user == graphrag_prompts.GLEAN_REQUEST:
        return json.dumps({"entities": [], "relationships": []})
    if system == graphrag_prompts.EXTRACT_SYSTEM:
        names = capitalised(user, 8)
        entities = [{"name": n, "type": "person", "description": f"{n} in {user[6:40]}"} for n in names]
        links = [
            {"source": a, "target": b, "description": f"{a} with {b}", "strength": 5}
            for a, b in itertools.pairwise(names)
        ]
        return json.dumps({"entities": entities, "relationships": links})
    if system == graphrag_prompts.SUMMARY_SYSTEM:
        return json.dumps({"description": "merged " + user.splitlines()[0]})
    if system == graphrag_prompts.REPORT_SYSTEM:
        names = capitalised(user, 4)
        return json.dumps(
            {"title": " and ".join(names) or "community", "summary": "About " + ", ".join(names), "rating": 3,
             "rating_explanation": "scripted", "findings": [{"summary": "scripted", "explanation": "scripted"}]}
        )  # fmt: skip
    return None


def raptor_answer(system: str, user: str) -> str | None:
    if system != raptor_prompts.SUMMARY_SYSTEM:
        return None
    names = capitalised(user, 10)
    return json.dumps({"summary": f"{user.count('Text ')} texts about " + ", ".join(names) + "."})


def answer(request: dict[str, Any]) -> str | None:
    """The scripted reply to any of engram's requests (None: the server answers with an error)."""
    task = task_of(request)
    if task == "reader":
        return "The passages name it.\nAnswer: unknown"
    if task == "filter":
        return json.dumps({"facts": [1]})
    opened = openie_answer(request)
    if opened is not None:
        return str(opened)
    system, user = request["messages"][0]["content"], last_user_text(request)
    for peer in (lightrag_answer, graphrag_answer, raptor_answer):
        found = peer(system, user)
        if found is not None:
            return found
    return None
