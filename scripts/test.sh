#!/usr/bin/env bash
# The test command (README.md): set up .venv if needed, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/engram ] || bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Default verbosity, not -q: each test file's name is printed before its tests run, so a long test or fixture
# shows where the run is; the 15 slowest steps are listed before the closing "N passed" line.
.venv/bin/python -m pytest --durations=15 "$@"
