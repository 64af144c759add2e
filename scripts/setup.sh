#!/usr/bin/env bash
# Create .venv with engram, the local embedder and the dev tools. Installs the CPU build of torch first
# so nothing pulls multi-GB CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[local,dev]"
