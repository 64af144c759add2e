"""Run reports: results.json, a markdown report, per-question details and PNG plots; and the side-by-side
comparison of several runs behind `engram report`. matplotlib is optional (the `eval` extra): without it
the plots are skipped and everything else is written."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.errors import InputError

RESULTS = "results.json"
DETAILS = "details.jsonl"
REPORT = "report.md"
RECALL_PLOT = "recall_at_k.png"
HOP_PLOT = "per_hop.png"


@dataclass
class Written:
    """What a report call wrote, and why plots were skipped (None when they were drawn)."""

    files: list[Path] = field(default_factory=list)
    plots_skipped: str | None = None


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "–"


def _keys(rows: Sequence[Mapping[str, Any]], section: str) -> list[str]:
    keys = {k for row in rows for k in row.get(section, {})}
    return sorted(keys, key=int)


def recall_table(methods: Mapping[str, Mapping[str, Any]], labels: Sequence[str] | None = None) -> str:
    """A markdown table: one row per method, recall@k and all-evidence@k columns, EM/F1 when answered."""
    rows = list(methods.values())
    names = list(labels or methods)
    ks, all_ks = _keys(rows, "recall"), _keys(rows, "all_recall")
    answered = any("em" in row for row in rows)
    header = ["method", *[f"R@{k}" for k in ks], *[f"all@{k}" for k in all_ks]]
    header += ["EM", "F1"] if answered else []
    header += ["ms/query"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in zip(names, rows):
        cells = [name, *[_fmt(row["recall"].get(k)) for k in ks], *[_fmt(row["all_recall"].get(k)) for k in all_ks]]
        cells += [_fmt(row.get("em")), _fmt(row.get("f1"))] if answered else []
        seconds = row.get("seconds_per_query")
        cells.append(f"{seconds * 1000:.1f}" if isinstance(seconds, (int, float)) else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def hop_table(methods: Mapping[str, Mapping[str, Any]], k: str = "5") -> str:
    hops: dict[str, int] = {}
    for row in methods.values():
        for hop, part in row.get("per_hop", {}).items():
            hops[hop] = part["questions"]
    if not hops:
        return ""
    order = sorted(hops)
    header = ["method", *[f"{hop} (n={hops[hop]})" for hop in order]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in methods.items():
        per_hop = row.get("per_hop", {})
        cells = [_fmt(per_hop.get(h, {}).get("recall", {}).get(k)) for h in order]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def comparison_table(comparisons: Sequence[Mapping[str, Any]]) -> str:
    if not comparisons:
        return ""
    lines = ["| method | vs | metric | Δ | 95% CI | p (two-sided) |", "|---|---|---|---|---|---|"]
    for c in comparisons:
        low, high = c["ci"]
        lines.append(
            f"| {c['a']} | {c['b']} | {c['metric']} | {c['delta']:+.3f} | [{low:+.3f}, {high:+.3f}] "
            f"| {c['p_value']:.4f} |"
        )
    return "\n".join(lines)


def markdown_report(result: Mapping[str, Any], plots: bool = True) -> str:
    """The report.md of one run."""
    setup = result.get("setup", {})
    index = result.get("index", {})
    parts = ["# engram eval", ""]
    if setup:
        parts += [f"- {key}: {json.dumps(value, ensure_ascii=False)}" for key, value in setup.items()]
    if index:
        parts.append("- index: " + ", ".join(f"{k} {v}" for k, v in index.items()))
    methods = result.get("methods", {})
    parts += ["", "## Recall", "", recall_table(methods)]
    fallbacks = {m: row["dense_fallbacks"] for m, row in methods.items() if row.get("dense_fallbacks")}
    if fallbacks:
        listed = ", ".join(f"{m} {n}" for m, n in fallbacks.items())
        parts += ["", f"Queries ranked densely for lack of seeds: {listed}"]
    hops = hop_table(methods)
    if hops:
        parts += ["", "## Recall@5 per hop type", "", hops]
    comparisons = comparison_table(result.get("comparisons", []))
    if comparisons:
        samples = result["comparisons"][0].get("samples")
        parts += ["", f"## Paired bootstrap ({samples} resamples of the questions)", "", comparisons]
    if plots:
        parts += ["", "## Plots", "", f"![recall@k]({RECALL_PLOT})", "", f"![recall@5 per hop type]({HOP_PLOT})"]
    parts += ["", f"Per-question details: `{DETAILS}` (retrieved ids, gold, kept facts, seeds, answers)."]
    return "\n".join(parts) + "\n"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_recall(series: Mapping[str, Mapping[str, float]], path: Path, title: str = "recall@k") -> bool:
    """Recall@k curves, one line per label; False when matplotlib is missing."""
    plt = _pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.8))
    styles, markers = ("-", "--", "-.", ":"), "osD^vP*X"
    for i, (label, recall) in enumerate(series.items()):
        ks = sorted(recall, key=int)
        style, marker = styles[i % len(styles)], markers[i % len(markers)]
        ax.plot([int(k) for k in ks], [recall[k] for k in ks], linestyle=style, marker=marker, label=label)
    ax.set_xscale("log")
    ticks = sorted({int(k) for recall in series.values() for k in recall})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set(xlabel="k (passages retrieved)", ylabel="recall@k", title=title, ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_per_hop(methods: Mapping[str, Mapping[str, Any]], path: Path, k: str = "5") -> bool:
    """Grouped bars: recall@k per hop type, one bar per method; False when matplotlib is missing."""
    plt = _pyplot()
    if plt is None:
        return False
    counts = {h: part["questions"] for row in methods.values() for h, part in row.get("per_hop", {}).items()}
    hops = sorted(counts)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.25 * len(hops) * max(1, len(methods)) + 3), 4.8))
    width = 0.8 / max(len(methods), 1)
    for i, (name, row) in enumerate(methods.items()):
        values = [row.get("per_hop", {}).get(h, {}).get("recall", {}).get(k, 0.0) for h in hops]
        ax.bar([x + i * width for x in range(len(hops))], values, width, label=name)
    centres = [x + width * (len(methods) - 1) / 2 for x in range(len(hops))]
    ax.set_xticks(centres, [f"{h}\n(n={counts[h]})" for h in hops])
    ax.set(ylabel=f"recall@{k}", title=f"recall@{k} per hop type", ylim=(0, 1))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_run(run_dir: str | Path, result: Mapping[str, Any], details: Sequence[Mapping[str, Any]]) -> Written:
    """Write results.json, details.jsonl, report.md and the plots into `run_dir` (created if needed)."""
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    written = Written()
    methods = result.get("methods", {})
    recall = {name: row["recall"] for name, row in methods.items()}
    drew = plot_recall(recall, folder / RECALL_PLOT) and plot_per_hop(methods, folder / HOP_PLOT)
    if drew:
        written.files += [folder / RECALL_PLOT, folder / HOP_PLOT]
    else:
        written.plots_skipped = "matplotlib is not installed (pip install 'engram[eval]')"
    (folder / RESULTS).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    with open(folder / DETAILS, "w", encoding="utf-8") as out:
        for row in details:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    (folder / REPORT).write_text(markdown_report(result, plots=drew), encoding="utf-8")
    written.files = [folder / RESULTS, folder / DETAILS, folder / REPORT, *written.files]
    return written


def load_run(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / RESULTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{run_dir} is not an eval run directory (cannot read {RESULTS}: {exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("methods"), dict):
        raise InputError(f"{path} has no 'methods' section")
    return data


def compare_runs(run_dirs: Sequence[str | Path], out: str | Path | None = None) -> tuple[str, Written]:
    """A markdown comparison of several runs (rows "run: method"); with `out` (a .md path), also written
    there with a recall@k plot of every row beside it."""
    rows: dict[str, Mapping[str, Any]] = {}
    labels: list[str] = []
    for run_dir in run_dirs:
        data = load_run(run_dir)
        label = Path(run_dir).resolve().name
        label = label if label not in labels else f"{label} ({labels.count(label) + 1})"
        labels.append(Path(run_dir).resolve().name)
        for method, summary in data["methods"].items():
            rows[f"{label}: {method}"] = summary
    text = "# engram runs compared\n\n" + recall_table(rows) + "\n"
    written = Written()
    if out is not None:
        target = Path(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        plot = target.with_suffix(".png")
        if plot_recall({k: v["recall"] for k, v in rows.items()}, plot, "recall@k, runs compared"):
            text += f"\n![recall@k]({plot.name})\n"
            written.files.append(plot)
        else:
            written.plots_skipped = "matplotlib is not installed (pip install 'engram[eval]')"
        target.write_text(text, encoding="utf-8")
        written.files.insert(0, target)
    return text, written
