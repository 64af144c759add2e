"""What each method costs in an evaluation: LLM tokens and time at indexing, time and LLM tokens per query,
disk; and the table that sets them side by side in the layout of the HippoRAG 2 paper's Table 12 (one column
per method, one row per resource, each cell with its share of HippoRAG 2's where that column is present).

Indexing cost: hipporag2 and its variants share the memory's OpenIE extraction (what `Memory.index` reported);
a peer method (lightrag, ...) has its own extraction, counted in its `peer_costs` ledger; dense and bm25 use no
LLM. Query cost: the LLM usage of the chat client while the method ran (query keywords, recognition filter,
and the reader with --qa), divided by the questions. Library code: returns values, never prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engram.retrieve.peers import PEERS

NO_LLM = ("dense", "bm25")
ROWS = (
    ("index_input_tokens", "Indexing input tokens"),
    ("index_output_tokens", "Indexing output tokens"),
    ("index_minutes", "Indexing time (min)"),
    ("query_seconds", "Time/query (sec)"),
    ("query_tokens", "LLM tokens/query"),
    ("disk_mb", "Index disk (MB)"),
)


def index_cost(method: str, openie: Mapping[str, Any], peer_costs: Mapping[str, Any] | None) -> dict[str, float]:
    """Indexing input/output tokens and minutes of `method`: a peer's own ledger, the memory's OpenIE run
    (`openie`: {"llm": IndexReport.llm, "seconds": ...}) for the hipporag family, nothing for dense and bm25."""
    if method in PEERS and peer_costs is not None:
        phase = peer_costs.get("phases", {}).get("index", {})
        return {
            "index_input_tokens": float(phase.get("prompt_tokens", 0)),
            "index_output_tokens": float(phase.get("completion_tokens", 0)),
            "index_minutes": float(phase.get("seconds", 0.0)) / 60,
            "disk_mb": float(peer_costs.get("disk_bytes", 0)) / 1e6,
        }
    if method.removeprefix("rse-") in NO_LLM:
        return {"index_input_tokens": 0.0, "index_output_tokens": 0.0}
    llm = openie.get("llm", {})
    return {
        "index_input_tokens": float(llm.get("prompt_tokens", 0)),
        "index_output_tokens": float(llm.get("completion_tokens", 0)),
        "index_minutes": float(openie.get("seconds", 0.0)) / 60,
    }


def query_cost(tokens: int, questions: int, seconds_per_query: float) -> dict[str, float]:
    return {"query_tokens": tokens / max(questions, 1), "query_seconds": seconds_per_query}


def _cell(value: float | None, base: float | None) -> str:
    if value is None:
        return "–"
    # millions as "0.84M", thousands in full ("3,190", never "3.19e+03")
    text = f"{value / 1e6:.2f}M" if value >= 1e5 else (f"{value:,.0f}" if value >= 1000 else f"{value:.3g}")
    if base:
        text += f" ({100 * value / base:.1f}%)"
    return text


def cost_table(methods: Mapping[str, Mapping[str, Any]], baseline: str = "hipporag2") -> str:
    """A markdown table: one column per method with a "cost" entry, one row per resource."""
    names: Sequence[str] = [n for n, row in methods.items() if "cost" in row]
    if not names:
        return ""
    base = methods[baseline]["cost"] if baseline in names else {}
    lines = ["| resource | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for key, label in ROWS:
        cells = [_cell(methods[n]["cost"].get(key), base.get(key)) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
