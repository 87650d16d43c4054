#!/usr/bin/env bash
# The README's main job: install lazyops (no GPU extras) and show every kernel and where it resolves here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/lazyops list
