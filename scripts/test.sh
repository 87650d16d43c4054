#!/usr/bin/env bash
# The README's test command: install everything from scratch into .venv, then run the whole suite.
# Triton runs in its interpreter when no GPU is present (tests/conftest.py sets TRITON_INTERPRET=1 then).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,triton,tilelang,cli
.venv/bin/python -m pytest "$@"
