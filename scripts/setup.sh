#!/usr/bin/env bash
# Create .venv with engram, the local embedder and the dev tools. Installs the CPU build of torch first
# so nothing pulls multi-GB CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[local,server,nlp,ann,postgres,peers,docs,site,dev]"
# headless Chromium and its driver for the web page test (tests/test_server_page.py); a no-op when present
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "setup: chromium/chromedriver missing and not root: the browser test will be skipped" >&2
  fi
fi
