#!/usr/bin/env bash
# Create .venv and install lazyops with the extras given as arguments (e.g. `test,triton,tilelang,cli`).
# torch is pinned to the CPU build this machine carries; an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0" -e ".${extras:+[$extras]}"
