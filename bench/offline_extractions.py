"""Extract a JSONL corpus with the offline (spaCy) extractor and write the extractions in the shared
data's format ({"id", "entities", "triples"} per line), for `engram eval --extractions`.

    .venv/bin/python bench/offline_extractions.py ../shared/data/musique-1890/corpus.jsonl runs/offline.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from engram.eval.data import read_jsonl
from engram.extract.offline import OfflineExtractor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    rows = read_jsonl(args.corpus)
    extractor = OfflineExtractor()
    start = time.perf_counter()
    outcomes = list(extractor.extract([(str(r["text"]), r.get("title")) for r in rows]))
    seconds = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as out:
        for row, outcome in zip(rows, outcomes):
            record = {"id": row["id"], "entities": outcome.entities, "triples": [list(t) for t in outcome.triples]}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    triples = sum(len(o.triples) for o in outcomes)
    mentions = sum(1 for o in outcomes for t in o.triples if t[1] == "mentions")
    print(f"{len(rows)} passages in {seconds:.1f} s ({1000 * seconds / max(len(rows), 1):.1f} ms/passage); "
          f"{triples} triples ({mentions} 'mentions' links), {extractor.identity}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
