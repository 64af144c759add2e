"""How fast `engram --help` answers (issue 53, acceptance 5: p50 under 0.3 s, without numpy or scipy).

Each round runs, one after the other, `python -c pass` (the interpreter's own start-up: the floor on this
machine under its present load), `python -m engram.cli --help`, the `engram` console script beside the
interpreter (when installed) and a subcommand's help; wall-clock times of whole processes. The rounds
interleave the commands, so a load that comes and goes touches each alike: on a shared machine compare the
ratio to `python -c pass` within one run. Last, the heavy libraries a `--help` imported (`-X importtime`).

    .venv/bin/python bench/bench_cli.py [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("numpy", "scipy", "torch", "openai", "fastapi", "sentence_transformers", "onnxruntime")


def commands() -> dict[str, list[str]]:
    python = sys.executable
    found = {
        "python -c pass": [python, "-c", "pass"],
        "python -m engram.cli --help": [python, "-m", "engram.cli", "--help"],
    }
    script = Path(python).parent / "engram"
    if script.exists():
        found["engram --help"] = [str(script), "--help"]
    found["engram index --help"] = [python, "-m", "engram.cli", "index", "--help"]
    found["engram serve --help"] = [python, "-m", "engram.cli", "serve", "--help"]
    return found


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def heavy_imports() -> list[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "engram.cli", "--help"], capture_output=True, text=True, timeout=120
    )
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return sorted({name.split(".")[0] for name in names} & set(HEAVY))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="rounds (each command once a round; default 10)")
    args = parser.parse_args()
    todo = commands()
    times: dict[str, list[float]] = {name: [] for name in todo}
    for argv in todo.values():  # warm the file cache once, unmeasured
        wall(argv)
    for _ in range(args.runs):
        for name, argv in todo.items():
            times[name].append(wall(argv))
    floor = statistics.median(times["python -c pass"])
    print(f"{args.runs} runs each, interleaved (wall clock of the whole process)")
    print(f"{'command':<30} {'p50':>8} {'p90':>8} {'min':>8} {'p50 / python -c pass':>22}")
    for name, values in times.items():
        p50 = statistics.median(values)
        print(
            f"{name:<30} {p50 * 1000:>6.0f}ms {percentile(values, 0.9) * 1000:>6.0f}ms {min(values) * 1000:>6.0f}ms "
            f"{p50 / floor:>21.1f}x"
        )
    heavy = heavy_imports()
    print(f"heavy libraries imported by --help: {', '.join(heavy) if heavy else 'none'}")


if __name__ == "__main__":
    main()
