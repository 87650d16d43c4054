#!/usr/bin/env bash
# The README's test command: install everything from scratch into .venv, then run the whole suite.
# Triton runs in its interpreter when no GPU is present (tests/kernels/conftest.py sets TRITON_INTERPRET=1 then).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,triton,tilelang,cli
# Lint and format-check the code, type-check src/ first (configured in pyproject.toml): a second or two, and a finding stops the run
# before the suite's minutes.
.venv/bin/ruff check src tests benchmarks examples
.venv/bin/ruff format --check src tests benchmarks examples
.venv/bin/mypy src
.venv/bin/python -m pytest "$@"
