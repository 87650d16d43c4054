#!/usr/bin/env bash
# The GPU runs behind the committed results, as the lent H200 machines take them: one part per call (each call
# has 10 minutes), results packed into one tarball under $OUT (a call brings back at most 8 files).
#
#   call 1 (any kind):  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#   call 2:             bash benchmarks/h200_session.sh engines      # on nvidia-h200-x2 (multi-GPU checks need two)
#   call 3:             bash benchmarks/h200_session.sh kernels
#
# The issue 12-14 session (one nvidia-h200, the machine kept warm between the two calls):
#   call A (carry .whl):  bash benchmarks/h200_session.sh triton     # installs .whl; torch and Triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh tilelang   # installs .whl2; TileLang and the benches
#
# The session after it (what changed since: the wrapper's host cost, Triton's norms as one kernel with their fp8
# forms, TileLang's rope and fp8 stores), same two calls on one warm machine, then a third:
#   call A (carry .whl):  bash benchmarks/h200_session.sh triton-recheck
#   call B (carry .whl2): bash benchmarks/h200_session.sh tilelang-recheck
#   call C (no carry):    bash benchmarks/h200_session.sh variants
#
# The session after that (the plain-call fast path, Triton launches without empty hook chains, the torch rope's
# GPU_ROTATION), two calls on one warm machine (call B merges into call A's results, still in /tmp/results):
#   call A (carry .whl):  bash benchmarks/h200_session.sh plain-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh plain-tilelang
# (that session's call A installed no .whl, so call B ran again carrying .whl; the install above now takes it
# whenever it is carried), then one call, no carry: bash benchmarks/h200_session.sh rope-rotation
#
# The session after that (the fast path's predicate over packed arguments, rope's fast path, one Python call less
# per kernel call), two calls on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh serve-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh serve-tilelang
# and after it (Triton's specialization key built flat; TileLang's executable called without its wrapper):
#   call A (carry .whl):  bash benchmarks/h200_session.sh launch-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh launch-tilelang
# then one call, no carry, for the torch rope's complex rotation:
#   bash benchmarks/h200_session.sh rope-complex
# and one, no carry, for the torch backend as fallback with that rope and silu_and_mul's product out of place:
#   bash benchmarks/h200_session.sh fallback
# and GPU time alone at 1024 and 8192 tokens (inside CUDA graphs), two calls on a fresh machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh graph-large
# and Triton's GEMM tilings at decode sizes (one call, no carry: Triton ships on the machine):
#   bash benchmarks/h200_session.sh gemm-sweep-triton
#
# Next (written 2026-12-01, not yet run): the decode GEMM with Triton's new tiling, then TileLang's sweep; two
# calls on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh gemm-next
#
# The session of 2026-12-01 (TileLang's GELU in the forms that do not cancel; the torch backend's one-token work;
# then the decode GEMM as above), three calls on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh gelu-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh gelu-tilelang
#   call C (no carry):    bash benchmarks/h200_session.sh gemm-sweep-tilelang
# then (the torch backend's float8 norms and float32 GELU off the CPU, TileLang's decode tiling from that sweep),
# two calls on one fresh machine, merging into the committed conformance results:
#   call A (carry .whl):  bash benchmarks/h200_session.sh retime-torch
#   call B (carry .whl2): bash benchmarks/h200_session.sh retime-tilelang
# then the torch backend's gated kernels as one jiterator kernel on CUDA, one call, no carry:
#   bash benchmarks/h200_session.sh jiterated
# and last (Triton's matmul plan remembered per token count; the layer with the jiterated silu), two calls:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh final
#
# Next (written 2026-12-01 11:30, not yet run): both backends' 64-row tilings at M = 64 as well as 128 (TileLang's
# decode-64 layer runs its M <= 128 plan with half its row blocks empty: 0.92x torch.compile), two calls:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh gemm-mid
#
# The session of 2026-12-01 afternoon (prefill-sized GEMM tilings for both backends, then the decode ones at
# M = 64), on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh large-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh large-tilelang
# then, with both backends' large tiles taken from those sweeps, on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh tiles-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh tiles-tilelang
#   call C (no carry):    bash benchmarks/h200_session.sh tiles-bench
# (run so far: tiles-triton, tiles-tilelang; tiles-tilelang's sweep set TileLang's 64-token bucket and its
# conformance found the full-row tile failing to compile for n=1, k=16 in fp16), then on a fresh machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh tiles-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh verify-tilelang
#   call C (no carry):    bash benchmarks/h200_session.sh layer
# and the stream table again with the day's kernels (the last full one was 2026-11-30 21:14), on a fresh machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh stream
# then Triton's fp8 norm with its stores 8 bytes a thread (one call, no carry; Triton ships on the machine):
#   bash benchmarks/h200_session.sh fp8-triton
# (reverted: within the runs' spread) and Triton's row kernels under other row layouts (one call, no carry):
#   bash benchmarks/h200_session.sh row-layouts
# then the fp8 norm with the 4 warps that sweep found (one call, no carry):
#   bash benchmarks/h200_session.sh fp8-warps
#
# Next (written 2026-12-01 13:05, not yet run): the matmul decode buckets across their token bounds at aligned and
# unaligned widths (tests/kernels/test_matmul_tiles.py's decode test, added after the session's GPU time was spent):
#   call A (carry .whl):  bash benchmarks/h200_session.sh tiles-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh verify-tilelang
#
# The session of 2026-12-01 afternoon, second (Triton's TMA GEMM kernel; the decode-bucket test above), one warm
# machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh triton-tma
#   call B (carry .whl2): bash benchmarks/h200_session.sh tiles-tilelang-decode
# then, with Triton's prefill tile by TMA (persistent) from that sweep, on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh tma-verify-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh tma-verify-tilelang
# then 128-row decode tiles at M = 128 for both backends and TileLang's persistent prefill tile, one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh rows128-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh persistent-tilelang
# then TileLang's 128-row decode plan from that sweep, verified and timed in the grid and the layer:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh split128-tilelang
# and Triton's decode GEMM against its launch path before the session (one call, no carry; ./ab_old filled first by
# `mkdir -p ab_old && git show 3354ebb:src/lazyops/_backends/triton/matmul.py > ab_old/matmul.py && git show
# 3354ebb:src/lazyops/_backends/triton/_launch.py > ab_old/_launch.py`, removed after):
#   bash benchmarks/h200_session.sh host-ab
# and every Triton kernel's conformance through the launcher as it now stands (one call, no carry):
#   bash benchmarks/h200_session.sh triton-recheck-all
# and Triton's TMA kernel at decode sizes (split-K through a 3-D descriptor), one call, no carry:
#   bash benchmarks/h200_session.sh decode-tma-triton
#
# The session of 2026-12-01 evening (the host cost of Triton's decode GEMM and of the torch backend's one-token
# calls), one call, no carry, to take the call apart before changing it:
#   bash benchmarks/h200_session.sh host-parts
# then (the decode tile by TMA only inside CUDA graphs; plain calls allocating [tokens, width] directly), on one warm
# machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh graphs-tma-triton
#   call B (carry .whl2): bash benchmarks/h200_session.sh graphs-tma-tilelang
# then Triton's M <= 128 tiles at M = 64 and 128 (one call, no carry):
#   bash benchmarks/h200_session.sh mid-triton
# then, with the M <= 128 rule from that sweep (one program an SM; the deep tile past 64 tokens), the same two
# calls again on one warm machine: graphs-tma-triton (carry .whl), graphs-tma-tilelang (carry .whl2)
# then the layer's prefill with host times (one call, no carry): bash benchmarks/h200_session.sh layer-host
# then TileLang's M <= 128 tiles with a deeper k-step, two calls on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh mid-tilelang
# then TileLang's M <= 128 plan from that sweep (DEEP_128 for narrow weights), checked and timed in the grid:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh deep-tilelang
# then Triton's deep tile by TMA (one call, no carry): bash benchmarks/h200_session.sh deep-tma-triton
#
# The session of 2026-12-01 evening (TileLang's M <= 128 tiles 64 columns wide: twice the programs of 64 x 128, no
# split-K, so no second launch), two calls on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh narrow-tilelang
# and Triton's (one call, no carry): bash benchmarks/h200_session.sh narrow-triton
# then TileLang's NARROW_128 plan checked and timed in the grid:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh narrow-tilelang-check
# then 32-column tiles (M = 64: 128 programs without a split; M = 128 with 128-row tiles: the weight read once):
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh narrow32
# then TileLang's NARROW_64 plan from that sweep, checked, and the layer (its decode-64 row) timed:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh narrow64-check
# (its pytest's summary fell outside the call's output tail; again alone:
#   call A (carry .whl): install; call B (carry .whl2): narrow64-tests)
# then TileLang's 112-column tiles for n = 14336 (128 tiles where 128-column ones make 112 on 132 SMs):
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh cols112
# then TileLang's narrow 16-row decode tiles (at n = 4096, 128 tiles of 32 columns: no split, one launch):
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh narrow16
# then NARROW_16 from that sweep, checked and timed in the grid:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh narrow16-check
#
# The session of 2026-12-01 night (what bounds the goals still open: the layer's floor part by part, and each
# memory-bound kernel's own copy ceiling at 1024 and 8192 tokens; the layer, the fallback table and the wrapper's
# host cost again with the final code), on one warm machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh ceilings
#   call C (no carry):    bash benchmarks/h200_session.sh same-bytes
# (ceilings' first step then summed the parts timed alone, which the layer beat: 622 against 720 us at 1024
# tokens; the script now times the floor as a layer, the skeleton) and again on a fresh machine:
#   call A (carry .whl):  bash benchmarks/h200_session.sh install
#   call B (carry .whl2): bash benchmarks/h200_session.sh floor
# then Triton's row layouts at 1024 tokens inside CUDA graphs, where the same-bytes copy left room (one call, no
# carry): bash benchmarks/h200_session.sh row-layouts-graph
#
# .whl and .whl2 hold the wheels benchmarks/README.md lists (TileLang; z3, liger-kernel, and rich with its small
# dependencies for the `lazyops` command). Unpack a call's tarball into benchmarks/results/ here.
set -uo pipefail
part=${1:?engines or kernels}
out=${OUT:-/tmp/out}
results=/tmp/results
mkdir -p "$results"
if [ -d .whl2 ] && [ ! -e /tmp/site/z3 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl2/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
step() { local limit=$1; shift; echo "== $*"; timeout "$limit" "$@" 2>&1 | grep -v "^[EW][0-9]\{4\} " | tail -40; }

if { [[ "$part" == triton* ]] || [ -d .whl ]; } && [ ! -e /tmp/site/tilelang ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi

# The checks every session since the plain-call path re-ran with Triton: conformance (torch and Triton), then the
# convention, launcher and plain-call tests.
triton_checks() {
  step 200 python3 benchmarks/gpu_conformance.py --backend torch --backend triton --tokens 1,7,128,4096 \
    --max-examples 2 --out "$results"
  step 100 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_conventions.py \
    tests/kernels/test_triton_launch.py tests/core/test_plain_call.py --lazyops-backend triton -x
}

# TileLang's conformance (merged into the Triton call's), then what each call costs on the host: lazyops against
# the launch it wraps, the profile of a call, and the M = 1024 bench with host and graph times.
tilelang_host_costs() {
  step 150 python3 benchmarks/gpu_conformance.py --backend tilelang --tokens 1,7,128,4096 --max-examples 2 \
    --merge --out "$results"
  step 150 python3 benchmarks/wrapper_cost.py --device cuda --backends torch,triton,tilelang --out "$results"
  step 60 python3 benchmarks/host_cost.py --calls 3000 --kernels rmsnorm,softmax,add_rmsnorm,rope,silu_and_mul \
    --out "$results"
  step 200 python3 benchmarks/gpu_bench.py --tokens 1024 --host --graph --out "$results"
}

# TileLang's matmul conformance merged into /tmp/matmul's (the torch and Triton rows of an earlier call or of the
# committed file, which the caller puts there), both files copied into the results.
tilelang_matmul_merged() {
  step 150 python3 benchmarks/gpu_conformance.py --backend tilelang --kernels matmul --tokens 1,7,128,4096 \
    --max-examples 8 --merge --out /tmp/matmul
  cp /tmp/matmul/gpu_conformance.md "$results/gpu_conformance_matmul.md"
  cp /tmp/matmul/gpu_conformance.json "$results/gpu_conformance_matmul.json"
}

# ... then the GEMM grid and the decoder layer: the check and the figures after a GEMM change.
tilelang_matmul_then_grid_and_layer() {
  tilelang_matmul_merged
  step 150 python3 benchmarks/gemm_grid.py --out "$results"
  step 200 python3 benchmarks/layer/decoder_layer.py --out "$results"
}

case $part in
triton)
  step 200 python3 benchmarks/gpu_conformance.py --backend torch --backend triton --tokens 1,7,128,4096 \
    --max-examples 2 --out "$results"
  step 120 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_conventions.py tests/kernels/test_triton_launch.py \
    --lazyops-backend triton -x
  step 80 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --repeats 3 --out "$results"
  step 170 python3 benchmarks/layer/decoder_layer.py --backend torch --backend triton --out "$results"
  ;;
tilelang)
  step 170 python3 benchmarks/gpu_bench.py --tokens 1024,8192,32768 --host --graph --out "$results"
  cp .gpu_in/gpu_conformance.json "$results/" 2>/dev/null
  step 120 python3 benchmarks/gpu_conformance.py --backend tilelang --tokens 1,7,128,4096 --max-examples 2 \
    --merge --out "$results"
  step 90 python3 benchmarks/gemm_grid.py --out "$results"
  cp .gpu_in/decoder_layer.json "$results/" 2>/dev/null
  step 150 python3 benchmarks/layer/decoder_layer.py --backend tilelang --merge --out "$results"
  ;;
triton-recheck)
  step 200 python3 benchmarks/gpu_conformance.py --backend torch --backend triton --tokens 1,7,128,4096 \
    --max-examples 2 --out "$results"
  step 120 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_conventions.py tests/kernels/test_triton_launch.py \
    --lazyops-backend triton -x
  step 100 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --tokens 1 1024 32768 --repeats 3 \
    --out "$results"
  step 60 python3 benchmarks/host_cost.py --calls 3000 --out "$results"
  ;;
tilelang-recheck)
  # 200 s ran out before silu_and_mul and softmax (2026-11-30 21:17); they were taken in a third call with
  # --kernels silu_and_mul,softmax --merge
  step 300 python3 benchmarks/gpu_bench.py --tokens 1024,8192,32768 --host --graph --out "$results"
  cp .gpu_in/gpu_conformance.json "$results/" 2>/dev/null
  step 150 python3 benchmarks/gpu_conformance.py --backend tilelang --tokens 1,7,128,4096 --max-examples 2 \
    --merge --out "$results"
  step 120 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_conventions.py --lazyops-backend tilelang -x
  ;;
plain-triton)
  triton_checks
  step 100 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --tokens 1 1024 32768 --repeats 3 \
    --out "$results"
  for rotation in upcast input; do
    step 50 python3 benchmarks/torch_backend.py --device cuda --kernels rope --dtypes bfloat16 float16 float32 \
      --tokens 1 1024 32768 --repeats 3 --rope-gpu-rotation $rotation --name torch_backend_cuda_rope_$rotation \
      --out "$results"
  done
  ;;
rope-rotation)
  # run while GPU_ROTATION defaulted to "input" (7abae1f plus that default, reverted in 2981801 after this call):
  # the torch backend's conformance and its rope in that rotation, then against the float32 one. To remake the
  # files, set the default to "input" first.
  step 150 python3 benchmarks/gpu_conformance.py --backend torch --tokens 1,7,128,4096 --max-examples 2 \
    --out "$results"
  step 60 python3 benchmarks/torch_backend.py --device cuda --kernels rope --dtypes bfloat16 float16 float32 \
    --tokens 1 1024 32768 --repeats 5 --out "$results"
  step 60 python3 benchmarks/torch_backend.py --device cuda --kernels rope --dtypes bfloat16 float16 float32 \
    --tokens 1 1024 32768 --repeats 5 --rope-gpu-rotation float32 --name torch_backend_cuda_rope_float32 \
    --out "$results"
  ;;
plain-tilelang)
  step 150 python3 benchmarks/gpu_conformance.py --backend tilelang --tokens 1,7,128,4096 --max-examples 2 \
    --merge --out "$results"
  step 60 python3 benchmarks/host_cost.py --calls 3000 --kernels rmsnorm,softmax,add_rmsnorm,rope,silu_and_mul \
    --out "$results"
  step 200 python3 benchmarks/gpu_bench.py --tokens 1024 --host --graph --out "$results"
  ;;
serve-triton)
  triton_checks
  step 100 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --tokens 1 1024 32768 --repeats 3 \
    --out "$results"
  ;;
launch-triton)
  triton_checks
  ;;
serve-tilelang | launch-tilelang)
  tilelang_host_costs
  ;;
rope-complex)
  # the torch backend's rope in its float32 rotation and as complex numbers, side by side in one session; then
  # the complex one as the default (in this copy only) through the conformance kit and the rope tests
  for rotation in float32 complex; do
    step 90 python3 benchmarks/torch_backend.py --device cuda --kernels rope --dtypes bfloat16 float16 float32 \
      --tokens 1 1024 32768 --repeats 5 --rope-gpu-rotation $rotation --name torch_backend_cuda_rope_$rotation \
      --out "$results"
  done
  sed -i 's/^GPU_ROTATION = "float32"$/GPU_ROTATION = "complex"/' src/lazyops/_backends/torch/rope.py
  mkdir -p /tmp/complex
  step 120 python3 benchmarks/gpu_conformance.py --backend torch --kernels rope --tokens 1,7,128,4096 \
    --max-examples 4 --out /tmp/complex
  cp /tmp/complex/gpu_conformance.md "$results/gpu_conformance_torch_rope_complex.md"
  step 60 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_rope.py \
    --lazyops-backend torch
  ;;
fallback)
  step 120 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --tokens 1 1024 32768 --repeats 3 \
    --out "$results"
  step 60 python3 benchmarks/torch_backend.py --device cuda --kernels silu_and_mul --dtypes float16 float32 \
    --tokens 1 1024 32768 --repeats 5 --name torch_backend_cuda_silu --out "$results"
  ;;
install)
  ;;
graph-large)
  # per call inside a CUDA graph at M = 1024 and 8192: the GPU's time alone, where back-to-back eager calls at
  # 1024 measure the host's
  step 400 python3 benchmarks/gpu_bench.py --tokens 1024 --graph --graph-tokens 1024,8192 --no-fullgraph \
    --out /tmp/graph
  cp /tmp/graph/gpu_bench.md "$results/gpu_bench_graph_large.md"
  cp /tmp/graph/gpu_bench.json "$results/gpu_bench_graph_large.json"
  ;;
variants)
  step 300 python3 benchmarks/tilelang_variants.py --out "$results"
  ;;
gemm-sweep-triton)
  step 420 python3 benchmarks/gemm_decode_sweep.py --out "$results"
  ;;
gelu-triton)
  triton_checks
  step 60 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_gelu_tail.py \
    --lazyops-backend triton
  step 60 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_gelu_tail.py \
    --lazyops-backend torch
  step 120 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --tokens 1 1024 32768 --repeats 3 \
    --out "$results"
  ;;
gelu-tilelang)
  step 150 python3 benchmarks/gpu_conformance.py --backend tilelang --tokens 1,7,128,4096 --max-examples 2 \
    --merge --out "$results"
  step 90 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_gelu_tail.py \
    --lazyops-backend tilelang
  step 120 python3 benchmarks/gpu_bench.py --kernels gelu_and_mul --tokens 1024,8192,32768 --graph \
    --graph-tokens 1024,8192 --no-fullgraph --out /tmp/gelu
  cp /tmp/gelu/gpu_bench.md "$results/gpu_bench_gelu.md"
  cp /tmp/gelu/gpu_bench.json "$results/gpu_bench_gelu.json"
  step 150 python3 benchmarks/gemm_grid.py --out "$results"
  ;;
retime-torch)
  cp benchmarks/results/gpu_conformance.json "$results/"
  step 150 python3 benchmarks/gpu_conformance.py --backend torch --tokens 1,7,128,4096 --max-examples 2 --merge \
    --out "$results"
  step 60 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_gelu_tail.py \
    --lazyops-backend torch
  step 120 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --tokens 1 1024 32768 --repeats 3 \
    --out "$results"
  step 90 python3 benchmarks/torch_backend.py --device cuda --kernels rmsnorm_fp8 add_rmsnorm_fp8 gelu_and_mul \
    --dtypes float16 float32 --tokens 1 1024 32768 --repeats 3 --name torch_backend_cuda_more_dtypes --out "$results"
  ;;
retime-tilelang)
  step 150 python3 benchmarks/gpu_conformance.py --backend tilelang --tokens 1,7,128,4096 --max-examples 2 \
    --merge --out "$results"
  step 120 python3 benchmarks/gemm_grid.py --out "$results"
  step 200 python3 benchmarks/layer/decoder_layer.py --out "$results"
  ;;
jiterated)
  cp benchmarks/results/gpu_conformance.json "$results/"
  step 150 python3 benchmarks/gpu_conformance.py --backend torch --tokens 1,7,128,4096 --max-examples 2 --merge \
    --out "$results"
  step 120 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_gelu_tail.py \
    tests/kernels/test_compile.py tests/kernels/test_conventions.py --lazyops-backend torch -k "gelu or silu or block"
  step 120 python3 benchmarks/torch_backend.py --device cuda --kernels silu_and_mul gelu_and_mul \
    --dtypes bfloat16 float16 float32 --tokens 1 1024 32768 --repeats 3 --name torch_backend_cuda_gated \
    --out "$results"
  ;;
final)
  step 100 python3 benchmarks/gemm_grid.py --out "$results"
  step 160 python3 benchmarks/layer/decoder_layer.py --out "$results"
  step 120 python3 benchmarks/wrapper_cost.py --device cuda --backends torch,triton,tilelang --out "$results"
  ;;
gemm-mid)
  mkdir -p /tmp/mid
  step 280 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --small-tokens 64,128 --budget-s 240 \
    --out /tmp/mid
  step 280 python3 benchmarks/gemm_decode_sweep.py --small-tokens 64,128 --budget-s 240 --out /tmp/mid
  for f in /tmp/mid/gemm_decode_sweep*; do cp "$f" "$results/mid_$(basename "$f")"; done
  ;;
large-triton)
  step 500 python3 benchmarks/gemm_large_sweep.py --backend triton --out "$results"
  ;;
large-tilelang)
  step 520 python3 benchmarks/gemm_large_sweep.py --backend tilelang --out "$results"
  ;;
tiles-triton)
  step 200 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    tests/kernels/test_conventions.py -k "matmul" --lazyops-backend triton
  mkdir -p /tmp/matmul
  step 150 python3 benchmarks/gpu_conformance.py --backend torch --backend triton --kernels matmul \
    --tokens 1,7,128,4096 --max-examples 8 --out /tmp/matmul
  ;;
tiles-tilelang)
  step 150 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    --lazyops-backend tilelang
  step 150 python3 benchmarks/gpu_conformance.py --backend tilelang --kernels matmul --tokens 1,7,128,4096 \
    --max-examples 4 --merge --out /tmp/matmul
  cp /tmp/matmul/gpu_conformance.md "$results/gpu_conformance_matmul.md"
  mkdir -p /tmp/mid
  step 260 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --buckets small --small-tokens 64,128 \
    --shared-epilogue --budget-s 220 --out /tmp/mid
  for f in /tmp/mid/gemm_decode_sweep_tilelang.*; do cp "$f" "$results/tma_$(basename "$f")"; done
  ;;
verify-tilelang)
  step 200 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    tests/kernels/test_conventions.py -k "matmul" --lazyops-backend tilelang
  tilelang_matmul_merged
  step 150 python3 benchmarks/gemm_grid.py --out "$results"
  ;;
triton-tma)
  # Triton's TMA GEMM kernel (one tile a program, persistent) checked, the matmul tiles' tests (the decode buckets
  # across their bounds among them), then the prefill sweep with the TMA candidates beside the pointer ones
  step 200 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_triton_matmul_tma.py \
    tests/kernels/test_matmul_tiles.py tests/kernels/test_triton_launch.py --lazyops-backend triton
  step 330 python3 benchmarks/gemm_large_sweep.py --backend triton --out "$results"
  ;;
tma-verify-triton)
  # Triton's prefill tile now by TMA, persistent: its kernel tests, the tiles' tests and conformance at 8 examples
  step 250 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_triton_matmul_tma.py \
    tests/kernels/test_matmul_tiles.py tests/kernels/test_conventions.py -k "matmul or tma" --lazyops-backend triton
  mkdir -p /tmp/matmul
  step 200 python3 benchmarks/gpu_conformance.py --backend torch --backend triton --kernels matmul \
    --tokens 1,7,128,4096 --max-examples 8 --out /tmp/matmul
  ;;
tma-verify-tilelang)
  tilelang_matmul_then_grid_and_layer
  ;;
rows128-triton)
  # Triton's 128-row tiles at M = 128 (the whole batch in one row block: the weight read once), the rule and
  # cuBLAS beside them; then the grid's Triton cells again (their stream times at 4096 x 4096 read 30-42 us at
  # 14:01, host-bound, against 19-22 us at 12:18; graph times unchanged)
  step 300 python3 benchmarks/gemm_decode_sweep.py --buckets small --small-rows 128 --tag rows128 --out "$results"
  mkdir -p /tmp/gridcheck
  step 120 python3 benchmarks/gemm_grid.py --impls cuBLAS,triton --out /tmp/gridcheck
  cp /tmp/gridcheck/gemm_grid.md "$results/gemm_grid_triton_recheck.md"
  cp /tmp/gridcheck/gemm_grid.json "$results/gemm_grid_triton_recheck.json"
  ;;
persistent-tilelang)
  # TileLang's persistent large tile (T.Persistent) checked and swept at prefill sizes, then its 128-row decode
  # tiles at M = 128
  step 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_tilelang_matmul_persistent.py
  # (run 2026-12-01 14:15 without --tag; its files were renamed to gemm_large_sweep_tilelang_persistent.*)
  step 250 python3 benchmarks/gemm_large_sweep.py --backend tilelang --tag persistent --out "$results"
  step 250 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --buckets small --small-rows 128 \
    --shared-epilogue --tag rows128 --budget-s 200 --out "$results"
  ;;
split128-tilelang)
  # TileLang's 128-row decode plan (M <= 128) across its bucket's bounds at aligned and unaligned widths, the
  # persistent program's check, matmul conformance (merged into the committed file), then the grid and the layer
  step 250 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    tests/kernels/test_tilelang_matmul_persistent.py --lazyops-backend tilelang
  mkdir -p /tmp/matmul && cp benchmarks/results/gpu_conformance_matmul.json /tmp/matmul/gpu_conformance.json
  tilelang_matmul_then_grid_and_layer
  ;;
triton-recheck-all)
  # every Triton kernel through the launcher as it now keys TMA descriptors: conformance (2 drawn examples each)
  mkdir -p /tmp/all
  step 300 python3 benchmarks/gpu_conformance.py --backend triton --tokens 1,7,128,4096 --max-examples 2 --out /tmp/all
  cp /tmp/all/gpu_conformance.md "$results/gpu_conformance_triton_launcher.md"
  ;;
decode-tma-triton)
  # Triton's TMA kernel with split-K (float32 partials through a [split, M, n] descriptor) checked, then timed on
  # the decode tilings the rule uses (16 x 128 x 128 and 64 x 128 x 64, 4 stages) at every split
  step 120 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_triton_matmul_tma.py \
    --lazyops-backend triton
  step 200 python3 benchmarks/gemm_decode_sweep.py --tma --only "16x128x128 w4 s4,64x128x64 w4 s4" --tag tma \
    --out "$results"
  ;;
deep-tilelang|narrow-tilelang-check)
  # TileLang's M <= 128 plan for narrow weights (deep-tilelang: 64 x 128 x 128; narrow-tilelang-check: NARROW_128):
  # the decode buckets' bounds at aligned and unaligned widths, matmul conformance (merged into the committed
  # file), then the grid
  step 250 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    tests/kernels/test_tilelang_matmul_persistent.py --lazyops-backend tilelang
  mkdir -p /tmp/matmul && cp benchmarks/results/gpu_conformance_matmul.json /tmp/matmul/gpu_conformance.json
  tilelang_matmul_merged
  step 150 python3 benchmarks/gemm_grid.py --out "$results"
  ;;
deep-tma-triton)
  # Triton's deep M <= 128 tile on the TMA kernel at every split, M = 64 and 128 (in graphs, beside the rule)
  step 300 python3 benchmarks/gemm_decode_sweep.py --tma --buckets small --small-tokens 64,128 \
    --only "64x128x128 w4 s3" --tag deep_tma --out "$results"
  ;;
mid-tilelang)
  # TileLang's M <= 128 tiles with a 128-deep k-step (64- and 128-row), direct stores, every split, M = 64 and 128
  step 450 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --buckets small --small-rows 64,128 \
    --small-tokens 64,128 --only "64x128x128 w4 s4,64x128x128 w4 s3,128x128x128 w8 s3,128x128x64 w8 s4" \
    --tag mid --budget-s 420 --out "$results"
  ;;
narrow-tilelang)
  # TileLang's 64-column tiles at M = 64 and 128 (64- and 128-row, 128- and 256-deep steps, 3-5 stages, every split)
  step 450 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --buckets small --small-rows 64,128 \
    --small-tokens 64,128 --only "64x64x128 w4 s4,64x64x128 w4 s5,64x64x256 w4 s3,128x64x128 w8 s3,128x64x128 w8 s4" \
    --tag narrow --budget-s 420 --out "$results"
  ;;
narrow64-check)
  # TileLang's M <= 64 plan for narrow weights (NARROW_64): the decode buckets' bounds at aligned and unaligned
  # widths, matmul conformance (merged into the committed file), then the decoder layer (decode-64 runs it)
  step 200 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    --lazyops-backend tilelang
  mkdir -p /tmp/matmul && cp benchmarks/results/gpu_conformance_matmul.json /tmp/matmul/gpu_conformance.json
  tilelang_matmul_merged
  step 250 python3 benchmarks/layer/decoder_layer.py --out "$results"
  ;;
narrow64-tests)
  step 200 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    --lazyops-backend tilelang -rA
  ;;
narrow16-check)
  # TileLang's M <= 16 plan for narrow weights (NARROW_16 unsplit): the decode buckets' bounds at aligned and
  # unaligned widths, matmul conformance (merged into the committed file), then the grid
  step 150 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    --lazyops-backend tilelang -rA 2>&1 | grep -v "^PASSED"
  mkdir -p /tmp/matmul && cp benchmarks/results/gpu_conformance_matmul.json /tmp/matmul/gpu_conformance.json
  tilelang_matmul_merged
  step 100 python3 benchmarks/gemm_grid.py --out "$results" | tail -3
  ;;
narrow16)
  step 300 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --buckets decode \
    --only "16x32x128 w4 s6,16x32x128 w4 s5,16x32x256 w4 s4,16x64x128 w4 s5,16x64x128 w4 s6" \
    --tag narrow16 --budget-s 280 --out "$results"
  ;;
cols112)
  step 300 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --buckets small --small-rows 64,128 \
    --small-tokens 64,128 --shared-epilogue --only "128x112x64 w8 s4,128x112x64 w8 s3,64x112x64 w4 s4,64x112x64 w4 s3" \
    --tag cols112 --budget-s 280 --out "$results"
  ;;
narrow32)
  # both backends' 32-column tiles at M = 64 and 128 (64- and 128-row, 128- and 256-deep steps, 4-6 stages)
  step 300 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --buckets small --small-rows 64,128 \
    --small-tokens 64,128 --only "64x32x128 w4 s5,64x32x128 w4 s6,64x32x256 w4 s3,64x32x256 w4 s4,128x32x128 w8 s4,128x32x128 w8 s5" \
    --tag narrow32 --budget-s 280 --out "$results"
  step 250 python3 benchmarks/gemm_decode_sweep.py --buckets small --small-tokens 64,128 \
    --only "64x32x128 w4 s5,64x32x128 w4 s6,64x32x256 w4 s4,64x64x128 w4 s5" --tag narrow32 --budget-s 230 --out "$results"
  ;;
narrow-triton)
  # Triton's 64-column tiles at M = 64 and 128 (128- and 256-deep steps, 4-5 stages, every split)
  step 450 python3 benchmarks/gemm_decode_sweep.py --buckets small --small-tokens 64,128 \
    --only "64x64x128 w4 s4,64x64x128 w4 s5,64x64x256 w4 s3,64x128x128 w4 s4" --tag narrow --budget-s 420 --out "$results"
  ;;
mid-triton)
  # the M <= 128 bucket's two tiles (block_k 64: two blocks an SM; 128: one, deeper stages) at every split, M = 64, 128
  step 400 python3 benchmarks/gemm_decode_sweep.py --buckets small --small-tokens 64,128 \
    --only "64x128x64 w4 s4,64x128x128 w4 s4" --tag mid --out "$results"
  ;;
layer-host)
  # the layer's prefill rows with their host time per call: is the compiled Triton row bound by its launches?
  mkdir -p /tmp/layer-host
  step 400 python3 benchmarks/layer/decoder_layer.py --workloads prefill-1024,prefill-8192 --backend torch \
    --backend triton --out /tmp/layer-host
  cp /tmp/layer-host/decoder_layer.md "$results/decoder_layer_host.md"
  cp /tmp/layer-host/decoder_layer.json "$results/decoder_layer_host.json"
  ;;
graphs-tma-triton)
  # the TMA kernel's tests (eager against replayed bits included), the decode buckets, the host parts again, then
  # matmul conformance for torch and Triton (TileLang's merged by call B)
  step 250 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_triton_matmul_tma.py \
    tests/kernels/test_matmul_tiles.py tests/core/test_plain_call.py --lazyops-backend triton
  step 150 python3 benchmarks/matmul_host_parts.py --out "$results"
  mkdir -p /tmp/matmul
  step 200 python3 benchmarks/gpu_conformance.py --backend torch --backend triton --kernels matmul \
    --tokens 1,7,128,4096 --max-examples 8 --out /tmp/matmul
  ;;
graphs-tma-tilelang)
  step 150 python3 benchmarks/matmul_host_parts.py --out "$results"
  tilelang_matmul_then_grid_and_layer
  ;;
host-parts)
  # where a Triton decode GEMM call's host time goes; then the profile of the one-token norms and softmax
  step 200 python3 benchmarks/matmul_host_parts.py --out "$results"
  step 120 python3 benchmarks/host_cost.py --calls 3000 --kernels rmsnorm,softmax,layernorm,matmul --out "$results"
  ;;
host-ab)
  # Triton's decode GEMM against its launch path of 3354ebb (extracted into ./ab_old by the caller), one process
  step 300 python3 benchmarks/matmul_host_ab.py --old ab_old --out "$results"
  ;;
tiles-tilelang-decode)
  step 500 python3 -m pytest -q -p no:cacheprovider -p lazyops.pytest_plugin tests/kernels/test_matmul_tiles.py \
    --lazyops-backend tilelang
  ;;
fp8-triton)
  mkdir -p /tmp/fp8
  step 150 python3 benchmarks/gpu_conformance.py --backend triton --kernels rmsnorm_fp8,add_rmsnorm_fp8 \
    --tokens 1,7,128,4096 --max-examples 8 --out /tmp/fp8
  cp /tmp/fp8/gpu_conformance.md "$results/gpu_conformance_fp8_triton.md"
  step 200 python3 benchmarks/gpu_bench.py --backend triton --kernels rmsnorm_fp8,rmsnorm --tokens 1024,8192,32768 \
    --out /tmp/fp8
  cp /tmp/fp8/gpu_bench.md "$results/gpu_bench_fp8_triton.md"
  cp /tmp/fp8/gpu_bench.json "$results/gpu_bench_fp8_triton.json"
  ;;
fp8-warps)
  mkdir -p /tmp/fp8
  step 100 python3 benchmarks/gpu_conformance.py --backend triton --kernels rmsnorm_fp8 --tokens 1,7,128,4096 \
    --max-examples 8 --out /tmp/fp8
  cp /tmp/fp8/gpu_conformance.md "$results/gpu_conformance_fp8_warps.md"
  step 100 python3 benchmarks/gpu_bench.py --backend triton --kernels rmsnorm_fp8 --tokens 1024,8192,32768 \
    --out /tmp/fp8
  cp /tmp/fp8/gpu_bench.md "$results/gpu_bench_fp8_warps.md"
  cp /tmp/fp8/gpu_bench.json "$results/gpu_bench_fp8_warps.json"
  ;;
row-layouts-graph)
  step 400 python3 benchmarks/triton_row_variants.py --graph --tokens 1024 --name triton_row_variants_graph1024 \
    --out "$results"
  ;;
row-layouts)
  step 400 python3 benchmarks/triton_row_variants.py --out "$results"
  ;;
stream)
  mkdir -p /tmp/stream
  step 520 python3 benchmarks/gpu_bench.py --tokens 1024,8192,32768 --out /tmp/stream
  cp /tmp/stream/gpu_bench.md "$results/gpu_bench_stream.md"
  cp /tmp/stream/gpu_bench.json "$results/gpu_bench_stream.json"
  cp /tmp/stream/*.png "$results/" 2>/dev/null
  ;;
layer)
  step 250 python3 benchmarks/layer/decoder_layer.py --out "$results"
  ;;
ceilings)
  step 150 python3 benchmarks/layer/layer_ceiling.py --out "$results"
  step 200 python3 benchmarks/layer/decoder_layer.py --out "$results"
  step 100 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --tokens 1 1024 32768 --repeats 3 \
    --out "$results"
  step 100 python3 benchmarks/wrapper_cost.py --device cuda --backends torch,triton,tilelang --out "$results"
  ;;
floor)
  step 300 python3 benchmarks/layer/layer_ceiling.py --out "$results"
  ;;
same-bytes)
  # every memory-bound kernel beside a copy of the bytes it moves, streamed and inside CUDA graphs, at the two
  # sizes whose goals are open (the PNGs stay behind: they would replace the stream table's)
  mkdir -p /tmp/same
  step 540 python3 benchmarks/gpu_bench.py --tokens 1024,8192 --graph --graph-tokens 1024,8192 --no-fullgraph \
    --kernels rmsnorm,add_rmsnorm,silu_and_mul,gelu_and_mul,softmax,layernorm,rope,rmsnorm_fp8,add_rmsnorm_fp8 \
    --out /tmp/same
  cp /tmp/same/gpu_bench.md "$results/gpu_bench_same_bytes.md"
  cp /tmp/same/gpu_bench.json "$results/gpu_bench_same_bytes.json"
  ;;
tiles-bench)
  step 150 python3 benchmarks/gemm_grid.py --out "$results"
  step 200 python3 benchmarks/layer/decoder_layer.py --out "$results"
  ;;
gemm-sweep-tilelang)
  step 560 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --budget-s 480 --out "$results"
  ;;
gemm-next)
  # the grid with Triton's measured tiling (TileLang's unchanged), then TileLang's tilings at decode sizes
  step 150 python3 benchmarks/gemm_grid.py --out "$results"
  step 400 python3 benchmarks/gemm_decode_sweep.py --backend tilelang --budget-s 360 --out "$results"
  ;;
engines)
  step 150 python3 benchmarks/multi_gpu.py --out "$results"
  step 150 python3 benchmarks/compile_block.py --out "$results"
  step 40 python3 benchmarks/host_cost.py --calls 3000 --out "$results"
  step 90 python3 benchmarks/torch_backend.py --device cuda --dtypes bfloat16 --repeats 3 --out "$results"
  ;;
kernels)
  step 100 python3 benchmarks/gpu_bench.py --tokens 1024,32768 --host --graph --out "$results"
  step 150 python3 benchmarks/layer/decoder_layer.py --out "$results"
  step 150 python3 benchmarks/gemm_grid.py --out "$results"
  cp .gpu_in/gpu_conformance.json "$results/" 2>/dev/null
  step 200 python3 benchmarks/gpu_conformance.py --backend torch --backend triton --tokens 1,7,128,4096 \
    --max-examples 2 --merge --out "$results"
  # Warm-up: every kernel's engine-sized configuration, built (compiled) from the default backend, with TileLang's
  # disk cache empty, then again with it filled (a server's second start).
  export TILELANG_CACHE_DIR=/tmp/tilelang-cache
  rm -rf "$TILELANG_CACHE_DIR"
  for start in cold cached; do
    TIMEFORMAT="warmup, $start: %R s wall"
    { time timeout 100 python3 -m lazyops warmup --tokens 1 > "$results/warmup_$start.txt" 2>&1; } 2>> "$results/warmup_times.txt"
    tail -4 "$results/warmup_$start.txt"
  done
  cat "$results/warmup_times.txt"
  ;;
esac
tar -czf "$out/$part.tar.gz" -C "$results" .
ls -la "$results"
