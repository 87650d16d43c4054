#!/usr/bin/env bash
# One GPU call for the GEMM grid and the decoder layer (issue 12), with TileLang installed from .whl in the same call:
#   run (carry [".whl"]):  bash benchmarks/h200_quick.sh
# Results land in $OUT as one tarball; unpack it into benchmarks/results/ here.
set -uo pipefail
out=${OUT:-/tmp/out}
results=/tmp/results
mkdir -p "$results"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
step() { local limit=$1; shift; echo "== $*"; timeout "$limit" "$@" 2>&1 | grep -v "^[EW][0-9]\{4\} " | tail -40; }
step 200 python3 benchmarks/gemm_grid.py --out "$results"
step 330 python3 benchmarks/layer/decoder_layer.py --out "$results"
tar -czf "$out/quick.tar.gz" -C "$results" .
ls -la "$results"
