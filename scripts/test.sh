#!/usr/bin/env bash
# The test command (README.md): set up .venv if needed, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/engram ] || bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/python -m pytest -q "$@"
