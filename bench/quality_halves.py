"""Markdown tables from an `engram eval --out RUN` folder, on all questions and on the two halves apart
(defaults are chosen on the first half; the second is held out): recall@k, all-evidence@k, recall@5 per hop
type, and paired bootstraps.

    .venv/bin/python bench/quality_halves.py runs/musique --pairs hipporag2:dense,hipporag2:hipporag2-paper
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from engram.eval.stats import paired_bootstrap

KS = ("1", "2", "5", "10", "20")
ALL_KS = ("2", "5", "10", "20")


def all_evidence(row: dict[str, Any], k: int) -> float:
    return 1.0 if set(row["gold"]) <= set(row["retrieved"][:k]) else 0.0


def load(run: Path) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """method -> its rows in question order; the question order."""
    by_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    order: list[str] = []
    for line in (run / "details.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        by_method[row["method"]].append(row)
        if row["id"] not in order:
            order.append(row["id"])
    return dict(by_method), order


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def recall_table(by_method: dict[str, list[dict[str, Any]]], part: slice) -> list[str]:
    lines = ["| method | " + " | ".join(f"R@{k}" for k in KS) + " | " + " | ".join(f"all@{k}" for k in ALL_KS) + " |",
             "|---" * (1 + len(KS) + len(ALL_KS)) + "|"]
    for method, rows in by_method.items():
        chosen = rows[part]
        recall = [f"{mean([r['recall'][k] for r in chosen]):.3f}" for k in KS]
        full = [f"{mean([all_evidence(r, int(k)) for r in chosen]):.3f}" for k in ALL_KS]
        lines.append(f"| {method} | " + " | ".join(recall + full) + " |")
    return lines


def hop_table(by_method: dict[str, list[dict[str, Any]]], k: str = "5") -> list[str]:
    hops = sorted({r["hops"] for rows in by_method.values() for r in rows})
    counts = {h: sum(1 for r in next(iter(by_method.values())) if r["hops"] == h) for h in hops}
    lines = ["| method | " + " | ".join(f"{h} ({counts[h]})" for h in hops) + " |", "|---" * (1 + len(hops)) + "|"]
    for method, rows in by_method.items():
        cells = [f"{mean([r['recall'][k] for r in rows if r['hops'] == h]):.3f}" for h in hops]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def bootstrap_table(
    by_method: dict[str, list[dict[str, Any]]], pairs: list[tuple[str, str]], samples: int
) -> list[str]:
    lines = ["| a | b | questions | metric | Δ (a - b) | 95% CI | p (two-sided) |", "|---|---|---|---|---|---|---|"]
    n = len(next(iter(by_method.values())))
    for a, b in pairs:
        if a not in by_method or b not in by_method:
            continue
        for label, part in (("all", slice(None)), ("first 25", slice(0, n // 2)), ("last 25", slice(n // 2, None))):
            for k in ("1", "2", "5"):
                x = [r["recall"][k] for r in by_method[a][part]]
                y = [r["recall"][k] for r in by_method[b][part]]
                result = paired_bootstrap(x, y, samples)
                lines.append(f"| {a} | {b} | {label} | recall@{k} | {result.delta:+.3f} | "
                             f"[{result.ci_low:+.3f}, {result.ci_high:+.3f}] | {result.p_value:.4f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="an `engram eval --out` folder")
    parser.add_argument("--pairs", default="hipporag2:dense,hipporag2:hipporag2-paper")
    parser.add_argument("--samples", type=int, default=10_000)
    args = parser.parse_args()
    if not (args.run / "details.jsonl").exists():
        print(f"{args.run} has no details.jsonl: run `engram eval ... --out {args.run}` first", file=sys.stderr)
        return 2
    by_method, order = load(args.run)
    half = len(order) // 2
    for label, part in ((f"all {len(order)}", slice(None)), (f"first {half} (tuning)", slice(0, half)),
                        (f"last {len(order) - half} (held out)", slice(half, None))):
        print(f"\n{label} questions\n")
        print("\n".join(recall_table(by_method, part)))
    print("\nrecall@5 per hop type (all questions; question counts in brackets)\n")
    print("\n".join(hop_table(by_method)))
    pairs = [(p.split(":", 1)[0], p.split(":", 1)[1]) for p in args.pairs.split(",") if ":" in p]
    print(f"\npaired bootstrap ({args.samples} resamples, seed 0)\n")
    print("\n".join(bootstrap_table(by_method, pairs, args.samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
