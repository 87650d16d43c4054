#!/usr/bin/env bash
# TileLang's and liger-kernel's wheels (.whl and .whl2, from ../shared/device/wheels.sh) as one archive that a single
# device call carries: the wheels unpacked, z3's command-line binary left out, xz-compressed (38 MB against 80 MB of
# wheels, over the 64 MiB a call may carry). Takes about 2.5 minutes on two cores.
#
#   bash scripts/pack_device_wheels.sh                   # writes .gpusite/site.tar.xz (git-ignored)
#   device call, carry [".gpusite"]:
#     tar xJf .gpusite/site.tar.xz -C /tmp && export PYTHONPATH=/tmp/site:$PWD/src && make gpu-check PYTHON=python3
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
wheels=(.whl/*.whl .whl2/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
    echo "pack_device_wheels: no wheels in .whl or .whl2; run bash ../shared/device/wheels.sh first" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for wheel in "${wheels[@]}"; do
    unzip -q -o "$wheel" -d "$work/site"  # unzip keeps the files' modes (python -m zipfile drops them)
done
rm -rf "$work"/site/*.data  # z3-solver's bin/z3: TileLang loads libz3 from the z3 package, never the command
mkdir -p .gpusite
tar -C "$work" -cf - site | xz -9 -T0 > .gpusite/site.tar.xz.part
mv .gpusite/site.tar.xz.part .gpusite/site.tar.xz
echo "wrote .gpusite/site.tar.xz ($(du -h .gpusite/site.tar.xz | cut -f1)) from ${#wheels[@]} wheels"
