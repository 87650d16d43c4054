#!/usr/bin/env bash
# The README's main job: install lazyops with its command line (the `cli` extra; no GPU extras; the `transformers`
# extra for examples/generate.py --hf) and run
# `lazyops doctor`: versions, device, backends, configuration, and every kernel run once and checked against
# the float64 reference. Its exit status is doctor's (0: everything selected works).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh cli,transformers
.venv/bin/lazyops doctor
