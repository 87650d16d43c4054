# The repository's tasks. `make test` and `make lint` run anywhere; the gpu-* targets on a lent H200 or H100
# (../shared/GPU.md: TileLang's and liger-kernel's wheels unpacked first), `make cpu-results` on the 2-core CPU machine.
# Each result file names the command that made it, so one file is remade by running that command alone.

SHELL := /bin/bash
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
# the checkout's lazyops, after whatever PYTHONPATH already names (the H200's wheel folder first)
export PYTHONPATH := $(if $(PYTHONPATH),$(PYTHONPATH):)$(CURDIR)/src

.PHONY: help test lint gpu-check gpu-results gpu-results-1 gpu-results-2 gpu-attention gpu-gemm gpu-host gpu-kernels \
	gpu-layer gpu-engine gpu-hf gpu-tune gpu-prune cpu-results gpu-attention-hf \
	gpu-kernel-defects gpu-sampling gpu-fp8 gpu-fp8gemm \
	gpu-fp8norms gpu-families gpu-fp8-check gpu-fp8-bench gpu-fp8gemm-check gpu-fp8gemm-bench \
	gpu-fp8norms-check gpu-fp8norms-bench gpu-tlfp8 gpu-tlfp8-check gpu-tlfp8-bench gpu-moe-check gpu-moe-bench \
	gpu-sampling-check gpu-sampling-bench gpu-sampling-paths gpu-families-check gpu-families-bench gpu-moe-layer gpu-fp8layer gpu-fp8layer-check gpu-fp8layer-bench gpu-fp8tiles \
	gpu-moe-layer-bisect

help:
	@echo "make test           the whole test suite (CI: bash scripts/test.sh installs, lints, then runs it)"
	@echo "make lint           ruff and ruff format on src/ tests/ benchmarks/ examples/, mypy on src/"
	@echo "make gpu-check      every GPU test, the example engine: GPU_OUT/gpu-check.md (one device call)"
	@echo "make gpu-kernel-defects  issue 33's kernel items on the device: GPU_OUT/gpu-kernel-defects.md (3 min)"
	@echo "make gpu-results-1  attention with its sweep, gemm, host (one device call; gpu-results: both calls' parts)"
	@echo "make gpu-results-2  kernels, layer --ceiling, the example engine against Hugging Face (one device call)"
	@echo "make gpu-prune      delete the old scripts' result files that today's have replaced"
	@echo "make gpu-attention-hf  issue 39 in one device call of under 7 minutes: attention, then the Hugging Face Llama"
	@echo "make gpu-fp8        issue 35's fp8 kernels: checks on the GPU, then their bandwidth (one call, ~3 min)"
	@echo "make gpu-fp8gemm    issue 35's matmul_fp8_tl: checks on the GPU, then bench_gemm.py --fp8 (one call, ~3 min)"
	@echo "make gpu-fp8norms   the fp8 norms' dynamic scales checked on the GPU, then the norms' bandwidth (~2 min)"
	@echo "make gpu-fp8layer   the example engine's fp8 mode on the GPU, then the fp8 layer against bf16 at prefill 8192 (~2 min)"
	@echo "make gpu-fp8tiles   matmul_fp8_tl's candidate Triton tiles swept on the GPU (~3 min): GPU_OUT/sweeps/fp8_tiles.*"
	@echo "make gpu-tlfp8      TileLang's fp8 kernels (issue 35): checks on the GPU, then their speed against Triton (~3 min)"
	@echo "make gpu-hf         a Hugging Face Llama: stock, lazyops.transformers.patch, liger-kernel (one device call)"
	@echo "make gpu-sampling   sample_tl's GPU checks, then bench_kernels.py --sampling (one device call, ~3 min)"
	@echo "make gpu-sampling-paths  Triton's split and one-program sampling paths: profiled, checked, then timed (~8 min)"
	@echo "make gpu-families   the fp8, MoE and sampling kernels: gpu-families-check, then gpu-families-bench (a call each)"
	@echo "make gpu-moe-layer  the Mixtral-8x7B and Qwen3-30B-A3B MoE layers, then the engine's qwen3-moe model (~2 min)"
	@echo "make gpu-tune       lazyops tune on the decoder layer's trace, twice, then the layer by its plan (GPU)"
	@echo "make cpu-results    the CPU result files into benchmarks/results/cpu/"

test:
	$(PYTHON) -m pytest

lint:
	$(PYTHON) -m ruff check src tests benchmarks examples
	$(PYTHON) -m ruff format --check src tests benchmarks examples
	$(PYTHON) -m mypy src

# --- the GPU part: three device calls of under 9 minutes each (a lent call is at most 10) ---------------------------
#
#   1. make gpu-check GPU_OUT=$OUT        the GPU tests and the example engine          1 file back
#   2. make gpu-results-1 GPU_OUT=$OUT    attention (checks, decode, prefill, sweep), gemm, host     6 files back
#   3. make gpu-results-2 GPU_OUT=$OUT    kernels, the layer and its bound, the engine against HF    6 files back
#
# GPU_OUT is where every part writes its result files, as it goes: on a lent machine $OUT, so that what a call wrote
# comes back even when it is cut off (at most 8 files a call come back). Each part is stopped (SIGINT: a script keeps
# the cells it finished, pytest prints its summary) after its own limit below, so a call ends within its 9 minutes
# whatever one part costs; every part also runs alone (`make gpu-attention`, ...). TileLang's and Triton's compiled
# programs are kept in GPU_CACHE for the call's duration, shared by its processes (a fresh machine starts empty).
# Then, on this machine: copy the files into benchmarks/results/h200/, `make gpu-prune`, `python
# scripts/performance_tables.py`, and commit.
GPU_OUT ?= benchmarks/results/h200
GPU_CACHE ?= /tmp/lazyops-gpu-cache
gpu-%: export TILELANG_CACHE_DIR := $(GPU_CACHE)/tilelang
gpu-%: export TRITON_CACHE_DIR := $(GPU_CACHE)/triton
gpu-%: export PYTHONUNBUFFERED := 1
# `$(call limit,SECONDS)`: the command after it is interrupted after SECONDS, and killed 10 s later
limit = timeout -s INT -k 10 $(1)

gpu-results: gpu-results-1 gpu-results-2

gpu-results-1:
	-$(MAKE) gpu-attention ATTENTION=--sweep ATTENTION_S=290
	-$(MAKE) gpu-gemm GEMM_S=130
	-$(MAKE) gpu-host HOST_S=60

gpu-results-2:
	-$(MAKE) gpu-kernels KERNELS_S=270
	-$(MAKE) gpu-layer LAYER_S=150
	-$(MAKE) gpu-engine ENGINE_S=90

# Attention over a paged KV cache (issues 29, 39): each backend's kernels checked, decode and prefill against SDPA's
# flash and cuDNN backends; ATTENTION=--sweep adds each backend's split counts and Triton's tiles (docs/decisions/010).
ATTENTION ?=
ATTENTION_S ?= 540
gpu-attention:
	$(call limit,$(ATTENTION_S)) $(PYTHON) benchmarks/bench_attention.py --out $(GPU_OUT) $(ATTENTION)

# Issue 39 in ONE device call of under 7 minutes on an H100 (a fresh machine: TileLang compiles each configuration in
# 10-20 s): attention (two drawn checks a kernel and the timed shapes' checks; decode, batch 1/16/64/256 x 1k/8k/32k in
# CUDA graphs, Triton and TileLang against SDPA cuDNN and flash; prefill 1 x 8192, 16 x 512, chunked 512 over 8192,
# paged and in order; then the split sweep for whatever time is left), then the Hugging Face Llama (prefill, eager
# decode, generate_batch). Each part stops after its limit, keeping the rows it finished (the scripts write as rows
# complete); at most 255 + 125 s, with the wheels' unpacking about 6.6 minutes. Logs: GPU_OUT/attention.log, hf.log;
# results: GPU_OUT/attention.{md,json}, hf.{md,json}.
GPU_ATTENTION_S ?= 245
GPU_HF_S ?= 115
gpu-attention-hf:
	@mkdir -p $(GPU_OUT)
	-$(MAKE) --no-print-directory gpu-attention ATTENTION="--examples 2 --sweep" ATTENTION_S=$(GPU_ATTENTION_S) 2>&1 \
		| tee $(GPU_OUT)/attention.log
	-$(MAKE) --no-print-directory gpu-hf HF_S=$(GPU_HF_S) 2>&1 | tee $(GPU_OUT)/hf.log
	@ls -l $(GPU_OUT)

GEMM_S ?= 540
gpu-gemm:
	$(call limit,$(GEMM_S)) $(PYTHON) benchmarks/bench_gemm.py --out $(GPU_OUT)

HOST_S ?= 540
gpu-host:
	$(call limit,$(HOST_S)) $(PYTHON) benchmarks/bench_host.py --parts calls --out $(GPU_OUT)

# The memory-bound kernels (stream 1024, 8192, 32768; CUDA graphs 1, 1024; host at one token) against their peers.
KERNELS_S ?= 540
gpu-kernels:
	$(call limit,$(KERNELS_S)) $(PYTHON) benchmarks/bench_kernels.py --out $(GPU_OUT)

# Sampling (issue 37): sample_tl and apply_penalties_tl: the conformance kit on the device (one case per configuration class), its kernel tests
# (log-probabilities, logit bias and token bitmask included; TileLang's sampler and penalties too), then bench_kernels.py
# --sampling (B = 1, 16, 64, 256 at V = 128256 and 151936, float32 and bf16, against vLLM's torch path,
# torch.compile of the spec's definition at V = 128256 and torch.multinomial; sample_tl with top-5 log-probabilities
# and apply_penalties_tl with a logit bias and a bitmask in bf16): GPU_OUT/sampling.{md,json} and
# GPU_OUT/sampling-check.md. About 8 minutes on a fresh H100: TileLang's sample_tl compiles about 35 programs
# (10-20 s each) before its checks.
SAMPLING_CHECK_S ?= 240
SAMPLING_S ?= 240
# more options, the later winning: SAMPLING="--dtypes bfloat16 --backend triton,tilelang --modes stream,graph --name sampling_bf16"
# (one dtype, the GPU backends, no host timing: under 4 minutes)
SAMPLING ?=
gpu-sampling: gpu-sampling-check gpu-sampling-bench
gpu-sampling-check:
	-$(call gpu_pytest_log,sample_tl and apply_penalties_tl on the GPU,gpu-sampling,sampling-check.md,$(SAMPLING_CHECK_S),\
	  tests/kernels/test_gpu_conformance.py -k "sample or penalties" tests/kernels/test_sample.py tests/kernels/test_penalties.py \
	  tests/kernels/test_sample_split.py)
gpu-sampling-bench:
	-$(call limit,$(SAMPLING_S)) $(PYTHON) benchmarks/bench_kernels.py --sampling --backend torch,triton,tilelang --out $(GPU_OUT) $(SAMPLING)

# Triton's two sampling paths in one device call (about 8 minutes with the machine's start): first where a call's
# time goes, launch by launch (scripts/profile_sampler.py: the split path took 1,759 µs at B = 1 on an H100 on
# 2026-12-07, no faster than one program a row), then the paths compared on the GPU (test_sample_split.py), then
# sample_tl in CUDA graphs at B = 1, 16, 64, 256 (V = 128256 and 151936, float32): the rule's row beside the split
# path over all rows, in SM-count and in half-L2 groups (SPLIT_GROUP), against torch.multinomial and vLLM's torch
# path. GPU_OUT/sampling_paths.{md,json,log}.
SAMPLING_PROFILE_S ?= 90
SAMPLING_PATHS_CHECK_S ?= 100
SAMPLING_PATHS_S ?= 200
gpu-sampling-paths:
	@mkdir -p $(GPU_OUT)
	{ echo "make gpu-sampling-paths on $$(date -u +%FT%TZ), $$(nvidia-smi --query-gpu=name --format=csv,noheader)"; \
	  SECONDS=0; $(call limit,$(SAMPLING_PROFILE_S)) $(PYTHON) scripts/profile_sampler.py; \
	  echo "profile: exit status $$? after $$SECONDS s"; \
	  SECONDS=0; $(call limit,$(SAMPLING_PATHS_CHECK_S)) $(PYTHON) -m pytest -q -p no:cacheprovider -rfE \
	    tests/kernels/test_sample_split.py -k triton 2>&1 | tail -n 20; echo "pytest: exit status $${PIPESTATUS[0]} after $$SECONDS s"; \
	  SECONDS=0; $(call limit,$(SAMPLING_PATHS_S)) $(PYTHON) benchmarks/bench_kernels.py --sampling --kernels sample \
	    --backend triton --modes graph --graph-tokens 1,16,256 --dtypes float32 --no-compile --name sampling_paths --out $(GPU_OUT); \
	  echo "bench: exit status $$? after $$SECONDS s"; } 2>&1 | tee $(GPU_OUT)/sampling_paths.log

LAYER_S ?= 540
# `make gpu-layer LAYER="--moe qwen3-30b-a3b"`: a MoE layer instead (issue 36)
LAYER ?= --ceiling
gpu-layer:
	$(call limit,$(LAYER_S)) $(PYTHON) benchmarks/bench_layer.py $(LAYER) --out $(GPU_OUT)

# Issue 36's MoE layer, one device call of about 5 minutes on an H100: bench_layer.py --moe at Mixtral-8x7B's shapes
# (2 of 8 experts, hidden 4096, 14336 each), then Qwen3-30B-A3B's (8 of 128, hidden 2048, 768 each): Triton's kernels
# (moe_route_tl, fused_moe_tl and the rest; also around cuBLAS GEMMs) against torch eager and torch.compile (its
# experts torch._grouped_mm), each also compiled, at decode 8 (a CUDA graph) and prefill 1024:
# GPU_OUT/layer_mixtral_8x7b.{md,json}, layer_qwen3_30b_a3b.{md,json}, written as workloads complete; then the example
# engine's qwen3-moe model (random weights, decode steps in CUDA graphs) on MOE_EXAMPLE_BACKEND (Triton: on the
# default order TileLang's GEMMs compile first, past the limit). Each part stopped at its limit; the log, headed by
# the date and the device, is GPU_OUT/moe-layer.log. On an H100 (2026-12-07) Qwen3's two workloads took 52 s and
# Mixtral's over 74 s (torch.compile of its prefill), hence 120.
MOE_LAYER ?= --backend triton --workloads decode-8,prefill-1024
MOE_LAYER_S ?= 120
MOE_EXAMPLE_BACKEND ?= triton,torch
gpu-moe-layer:
	@mkdir -p $(GPU_OUT)
	{ echo "make gpu-moe-layer MOE_LAYER='$(MOE_LAYER)' on $$(date -u +%FT%TZ), $$(nvidia-smi --query-gpu=name --format=csv,noheader)"; \
	  for model in mixtral-8x7b qwen3-30b-a3b; do SECONDS=0; echo "$$ bench_layer.py --moe $$model $(MOE_LAYER)"; \
	    $(call limit,$(MOE_LAYER_S)) $(PYTHON) benchmarks/bench_layer.py --moe $$model $(MOE_LAYER) --out $(GPU_OUT); \
	    echo "exit status $$? after $$SECONDS s"; done; echo '$$ LAZYOPS_BACKEND=$(MOE_EXAMPLE_BACKEND) examples/generate.py --model qwen3-moe --tokens 16'; \
	  SECONDS=0; LAZYOPS_BACKEND=$(MOE_EXAMPLE_BACKEND) $(call limit,60) $(PYTHON) examples/generate.py --model qwen3-moe --tokens 16; \
	  echo "exit status $$? after $$SECONDS s"; } 2>&1 | tee $(GPU_OUT)/moe-layer.log

# Which row of the MoE layer poisons the device (issue 36: on an H100, 2026-12-07, decode-8 hit a device-side index
# assert, in Inductor's kernel with torch.compile's rows and in ATen's gather without, and every row then failed):
# Mixtral-8x7B's decode-8, each row alone in its own process, in a CUDA graph, then out of one (--decode-stream,
# with CUDA_LAUNCH_BLOCKING=1: the failing call's traceback names the op); then, where the device has NVIDIA's
# compute-sanitizer, the Triton row out of a graph under its memcheck (an out-of-bounds write names its kernel).
# About 4 minutes on an H100; the log, headed by the date and the device, is GPU_OUT/moe-layer-bisect.log.
MOE_BISECT_ROWS ?= "torch eager" "lazyops triton" "lazyops triton, cuBLAS GEMMs"
MOE_BISECT = benchmarks/bench_layer.py --moe mixtral-8x7b --backend triton --workloads decode-8 --no-compile \
	--out /tmp/moe-bisect
SANITIZER = $(firstword $(shell command -v compute-sanitizer) $(wildcard /usr/local/cuda*/bin/compute-sanitizer))
gpu-moe-layer-bisect: export LAZYOPS_BENCH_TRACEBACK := 1
gpu-moe-layer-bisect:
	@mkdir -p $(GPU_OUT)
	{ echo "make gpu-moe-layer-bisect on $$(date -u +%FT%TZ), $$(nvidia-smi --query-gpu=name --format=csv,noheader)"; \
	  for mode in "" --decode-stream; do for row in $(MOE_BISECT_ROWS); do SECONDS=0; \
	    blocking=$$([ -n "$$mode" ] && echo 1 || echo 0); \
	    echo "$$ CUDA_LAUNCH_BLOCKING=$$blocking $(MOE_BISECT) --only '$$row' $$mode"; \
	    CUDA_LAUNCH_BLOCKING=$$blocking $(call limit,40) $(PYTHON) $(MOE_BISECT) --only "$$row" $$mode 2>&1 \
	      | grep -v IndexKernelUtils | tail -n 30; \
	    echo "exit status $${PIPESTATUS[0]} after $$SECONDS s"; done; done; \
	  if [ -n "$(SANITIZER)" ]; then SECONDS=0; \
	    echo "$$ compute-sanitizer --tool memcheck $(MOE_BISECT) --only 'lazyops triton' --decode-stream"; \
	    $(call limit,150) $(SANITIZER) --tool memcheck --print-limit 20 $(PYTHON) $(MOE_BISECT) --only "lazyops triton" \
	      --decode-stream 2>&1 | grep -v IndexKernelUtils | tail -n 80; \
	    echo "exit status $${PIPESTATUS[0]} after $$SECONDS s"; \
	  else echo "no compute-sanitizer on this device: the memcheck step is not run"; fi; } 2>&1 | tee $(GPU_OUT)/moe-layer-bisect.log

# Issue 36's experts against their goals (bench_kernels.py --moe): fused_moe_tl at Mixtral-8x7B's and Qwen3-30B-A3B's
# experts, routed evenly; decode T = 1, 8, 64 in CUDA graphs (the experts' bytes at ≥ 80 % of the copy's rate), prefill
# 4096 and 16384 in stream (≥ 1.0× torch._grouped_mm): GPU_OUT/moe_experts.{md,json}. About 3 minutes on an H100 with
# Triton alone; MOE_EXPERTS="--backend triton,tilelang" adds TileLang's (its programs compile first).
MOE_EXPERTS ?= --backend triton
MOE_EXPERTS_S ?= 240
gpu-moe-experts:
	-$(call limit,$(MOE_EXPERTS_S)) $(PYTHON) benchmarks/bench_kernels.py --moe --out $(GPU_OUT) $(MOE_EXPERTS)

# Issue 36's MoE kernels (moe_route_tl, moe_align_tl, fused_moe_tl): their GPU conformance (Triton, TileLang where
# it has them: the route and the alignment) and the whole Triton layer captured in a CUDA graph under
# set_sync_debug_mode("error") (Qwen3-30B-A3B and DeepSeek-V3 routing, with and without an expert map; TileLang's
# route and alignment too, against Triton's), then each backend against torch's loop in bench_kernels
# (decode 1, 8, 64 and 256 tokens in CUDA graphs: the route and the alignment together ≤ 10 µs at T ≤ 256;
# prefill 4096): GPU_OUT/moe.{md,json}. 5 to 7 minutes on a fresh H100 (TileLang's MoE programs compile first).
MOE_CHECK_S ?= 200
MOE_S ?= 180
gpu-moe: gpu-moe-check gpu-moe-bench
gpu-moe-check:
	-$(call gpu_pytest_log,The MoE kernels on the GPU,gpu-moe,moe-check.md,$(MOE_CHECK_S),\
	  tests/kernels/test_gpu_conformance.py -k moe tests/kernels/test_moe_host_reads.py)
gpu-moe-bench:
	-$(call limit,$(MOE_S)) $(PYTHON) benchmarks/bench_kernels.py --kernels moe_route_tl,moe_align_tl,fused_moe_tl --name moe \
		--tokens 64,4096 --graph-tokens 1,8,64,256 --no-compile --out $(GPU_OUT)

# The example engine's decode step (4 Llama-3-8B layers, random weights) in CUDA graphs against Hugging Face's
# static cache under torch.compile, batch 1 and 32: GPU_OUT/engine.{md,json}.
ENGINE_S ?= 540
gpu-engine:
	$(call limit,$(ENGINE_S)) $(PYTHON) examples/generate.py --bench --out $(GPU_OUT)

# Issue 35's fp8 kernels on the GPU, one device call of about 3 minutes: their conformance (one case per
# configuration class, each GPU backend that serves them) and their own tests on the device, logged with the
# command, the date and the device in GPU_OUT/fp8-check.md; then their bandwidth against a copy of the same bytes and
# torch eager / torch.compile (stream at 8192 and 32768 tokens, CUDA graphs at 1024): GPU_OUT/fp8_kernels.{md,json}.
FP8_KERNELS ?= quant_fp8_tl,silu_and_mul_fp8_tl,rmsnorm_fp8_tl,add_rmsnorm_fp8_tl
FP8_CHECK_S ?= 90
FP8_BENCH_S ?= 90
gpu-fp8: gpu-fp8-check gpu-fp8-bench
gpu-fp8-check:
	-$(call gpu_pytest_log,fp8 kernels on the GPU,gpu-fp8,fp8-check.md,$(FP8_CHECK_S),\
	  tests/kernels/test_gpu_conformance.py -k "quant_fp8 or silu_and_mul_fp8 or rmsnorm_fp8" tests/kernels/test_quant_fp8.py)
gpu-fp8-bench:
	-$(call limit,$(FP8_BENCH_S)) $(PYTHON) benchmarks/bench_kernels.py --kernels $(FP8_KERNELS) --tokens 8192,32768 \
	  --graph-tokens 1024 --modes stream,graph --name fp8_kernels --out $(GPU_OUT)

# Issue 35's fp8 GEMM, one device call of about 3 minutes: matmul_fp8_tl's GPU checks (the torch backend's
# torch._scaled_mm and dequantising routes, each scale kind and output dtype; the GPU backends' conformance where they
# serve it), logged with the command, the date and the device in GPU_OUT/fp8gemm-check.md; then bench_gemm.py --fp8
# at the issue's grid (Llama-3-8B shapes, bf16 out) against torch._scaled_mm and the bf16 GEMM:
# GPU_OUT/fp8_gemm.{md,json} (written after every cell: a cut-off run keeps what it measured).
FP8GEMM_BACKENDS ?= torch,triton
FP8GEMM_CHECK_S ?= 90
FP8GEMM_BENCH_S ?= 120
gpu-fp8gemm: gpu-fp8gemm-check gpu-fp8gemm-bench
gpu-fp8gemm-check:
	-$(call gpu_pytest_log,matmul_fp8_tl on the GPU,gpu-fp8gemm,fp8gemm-check.md,$(FP8GEMM_CHECK_S),\
	  tests/kernels/test_matmul_fp8.py tests/kernels/test_gpu_conformance.py -k matmul_fp8)
gpu-fp8gemm-bench:
	-$(call limit,$(FP8GEMM_BENCH_S)) $(PYTHON) benchmarks/bench_gemm.py --fp8 tensor,rowwise,block \
	  --backend $(FP8GEMM_BACKENDS) --tokens 1,16,128,1024,4096,8192 --graph-max 16 \
	  --shapes 4096x4096,14336x4096,4096x14336,6144x4096 --name fp8_gemm --out $(GPU_OUT)

# The fp8 norms' dynamic scales (issue 35) on the GPU, one device call of about 2 minutes: their conformance (one
# case per configuration class: static, per token, per group, each GPU backend that serves them; TileLang declines
# the dynamic ones) and the fused-against-unfused bit-for-bit tests, logged with the command, the date and the device
# in GPU_OUT/fp8norms-check.md; then the norms' bandwidth (the harness times the static form: bench_kernels.py has
# no scales option yet) against a copy of the same bytes: GPU_OUT/fp8norms_kernels.{md,json}.
FP8NORMS_CHECK_S ?= 75
FP8NORMS_BENCH_S ?= 60
gpu-fp8norms: gpu-fp8norms-check gpu-fp8norms-bench
gpu-fp8norms-check:
	-$(call gpu_pytest_log,fp8 norms' dynamic scales on the GPU,gpu-fp8norms,fp8norms-check.md,$(FP8NORMS_CHECK_S),\
	  tests/kernels/test_gpu_conformance.py -k "rmsnorm_fp8 or fp8_norm_scales" tests/kernels/test_fp8_norm_scales.py)
gpu-fp8norms-bench:
	-$(call limit,$(FP8NORMS_BENCH_S)) $(PYTHON) benchmarks/bench_kernels.py --kernels rmsnorm_fp8_tl,add_rmsnorm_fp8_tl \
	  --tokens 8192,32768 --graph-tokens 1024 --modes stream,graph --name fp8norms_kernels --out $(GPU_OUT)

# Issue 35's fp8 client on the GPU, one device call of about 2 minutes on an H100: the example engine's fp8 mode (block
# and channel scales, float32 activations, so that its greedy tokens must equal its float32 twin's: exit status 1 if
# not), logged with the date and the device in GPU_OUT/fp8layer-check.md; then the Llama-3-8B decoder layer from fp8
# weights (block and channel; the fp8 producers, matmul_fp8_tl) against the bf16 layers (torch eager, Triton's kernels,
# Triton's around cuBLAS GEMMs; FP8LAYER= to add torch.compile's, minutes more) at prefill 8192, issue 35's goal
# >= 1.3x the fastest: GPU_OUT/fp8_layer.{md,json}.
# The check runs on one backend, Triton's by default: the platform default compiles TileLang's programs for every
# kernel of the engine first, which outlasted 40 s a mode on a fresh H100 (2026-12-06).
FP8LAYER_CHECK_S ?= 90
FP8LAYER_CHECK_BACKEND ?= triton
FP8LAYER_S ?= 120
FP8LAYER ?= --backend triton --no-compile
gpu-fp8layer: gpu-fp8layer-check gpu-fp8layer-bench
gpu-fp8layer-check:
	@mkdir -p $(GPU_OUT)
	-{ echo "# The example engine's fp8 mode on the GPU"; echo; \
	  echo "Made by \`make gpu-fp8layer-check\` on $$(date -u +%FT%TZ); do not edit, rerun it."; \
	  echo "Device: $$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)."; echo; echo '```'; \
	  for mode in block channel; do \
	    echo "$$ LAZYOPS_BACKEND=$(FP8LAYER_CHECK_BACKEND) python examples/generate.py --fp8 $$mode --dtype float32 --tokens 8   # limit $(FP8LAYER_CHECK_S) s"; \
	    SECONDS=0; LAZYOPS_BACKEND=$(FP8LAYER_CHECK_BACKEND) $(call limit,$(FP8LAYER_CHECK_S)) $(PYTHON) examples/generate.py --fp8 $$mode --dtype float32 \
	      --tokens 8 2>&1 | tail -n 6; echo "exit status $${PIPESTATUS[0]} after $$SECONDS s"; \
	  done; echo '```'; } | tee $(GPU_OUT)/fp8layer-check.md
gpu-fp8layer-bench:
	-$(call limit,$(FP8LAYER_S)) $(PYTHON) benchmarks/bench_layer.py --fp8 block,channel --workloads prefill-8192 \
	  $(FP8LAYER) --name fp8_layer --out $(GPU_OUT)

# matmul_fp8_tl's Triton tiles swept on the device (one call of about 3 minutes): candidate rows of
# configs/matmul_fp8.json (vLLM's decode tiles, the seeded 64x128, larger prefill tiles) beside the table's rule and
# torch._scaled_mm, rowwise and block, at decode and prefill token counts: GPU_OUT/sweeps/fp8_tiles.{md,json}; the
# winners go into the device's table (docs/decisions/014).
FP8TILES_S ?= 170
FP8TILES ?= block_m=16,block_n=32,num_warps=4,num_stages=3;block_m=16,block_n=64,num_warps=4,num_stages=3;\
block_m=16,block_n=128,num_warps=4,num_stages=3;block_m=64,block_n=64,num_warps=4,num_stages=3;\
block_m=64,block_n=128,num_warps=4,num_stages=3;block_m=128,block_n=128,num_warps=4,num_stages=3;\
block_m=128,block_n=128,num_warps=8,num_stages=3;block_m=128,block_n=256,num_warps=8,num_stages=3
gpu-fp8tiles:
	-$(call limit,$(FP8TILES_S)) $(PYTHON) benchmarks/bench_gemm.py --fp8 rowwise,block --sweep triton --backend triton \
	  --tokens 16,1024,8192 --shapes 4096x4096,14336x4096 --graph-max 16 --tiles '$(FP8TILES)' --name fp8_tiles \
	  --out $(GPU_OUT)
# TileLang's fp8 kernels (issue 35: quant_fp8_tl, silu_and_mul_fp8_tl, the fp8 norms' dynamic scales, matmul_fp8_tl),
# which have never run on a GPU, in one device call of about 4 minutes on an H100 (a fresh machine compiles each
# configuration in 10-20 s): the conformance kit over TileLang alone (one case per configuration class: every scale
# kind, ragged M, n, k) and the fp8 kernels' own tests with --lazyops-backend tilelang (zero rows, NaN, saturation,
# UE8M0, column-major scales, strided rows, fused against unfused bit for bit, block scales on their own blocks),
# logged with the command, the date and the device in GPU_OUT/tlfp8-check.md; then the fp8 kernels' bandwidth
# (TileLang against Triton and a copy of the same bytes: GPU_OUT/tlfp8_kernels.{md,json}) and the GEMM at the issue's
# Llama-3-8B shapes (TileLang against Triton, torch._scaled_mm and bf16: GPU_OUT/tlfp8_gemm.{md,json}).
# The warm-up compiles the fp8 kernels' conformance configurations only (LAZYOPS_GPU_AHEAD), 8 at a time; the kernel
# tests compile theirs as they reach them, so the GEMM's come first and a cut-off check keeps what it finished.
TLFP8_CHECK_S ?= 150
TLFP8_BENCH_S ?= 30
TLFP8_GEMM_S ?= 50
gpu-tlfp8: gpu-tlfp8-check gpu-tlfp8-bench
gpu-tlfp8-check: export LAZYOPS_GPU_AHEAD := $(FP8_KERNELS),matmul_fp8_tl
gpu-tlfp8-check:
	-$(call gpu_pytest_log,TileLang's fp8 kernels on the GPU,gpu-tlfp8,tlfp8-check.md,$(TLFP8_CHECK_S),\
	  tests/kernels/test_gpu_conformance.py -k "tilelang and fp8" --lazyops-backend tilelang \
	  tests/kernels/test_matmul_fp8.py tests/kernels/test_quant_fp8.py tests/kernels/test_fp8_norm_scales.py)
gpu-tlfp8-bench:
	@echo "== gpu-tlfp8: the fp8 kernels' bandwidth, TileLang against Triton (limit $(TLFP8_BENCH_S) s)"
	-$(call limit,$(TLFP8_BENCH_S)) $(PYTHON) benchmarks/bench_kernels.py --kernels $(FP8_KERNELS) --backend tilelang,triton \
	  --tokens 8192,32768 --graph-tokens 1024 --modes stream,graph --no-compile --name tlfp8_kernels --out $(GPU_OUT)
	@echo "== gpu-tlfp8: matmul_fp8_tl, TileLang against Triton and torch._scaled_mm (limit $(TLFP8_GEMM_S) s)"
	-$(call limit,$(TLFP8_GEMM_S)) $(PYTHON) benchmarks/bench_gemm.py --fp8 tensor,rowwise,block \
	  --backend tilelang,triton --tokens 1,16,128,1024,4096,8192 --graph-max 16 \
	  --shapes 4096x4096,14336x4096,4096x14336,6144x4096 --name tlfp8_gemm --out $(GPU_OUT)
	@ls -l $(GPU_OUT)

# The families' checks warm TileLang up for their own kernels only: the whole warm-up (every TileLang kernel's
# configurations, 10-20 s each on a fresh machine) outlasted each check's limit on an H100 (2026-12-06), which then
# reported nothing.
gpu-fp8-check gpu-fp8norms-check: export LAZYOPS_GPU_AHEAD := $(FP8_KERNELS)
gpu-fp8gemm-check: export LAZYOPS_GPU_AHEAD := matmul_fp8_tl
gpu-moe-check: export LAZYOPS_GPU_AHEAD := moe_route_tl,moe_align_tl,fused_moe_tl
gpu-sampling-check: export LAZYOPS_GPU_AHEAD := sample_tl,apply_penalties_tl

# The new kernel families (issues 35-37) in TWO device calls of under 9 minutes each: every family's GPU checks
# (logged in GPU_OUT/<family>-check.md), then, in the second call, each one's benchmark; each part stopped at its
# limit. One call did not fit: on a fresh H100 (2026-12-07) the checks alone took 308 s, each cut at its 60 s limit
# after 2 to 21 tests (TileLang's programs compiled ahead take 35 s of it), and the benchmarks were stopped by the
# call's 590 s in the sampling part. Each call leaves at most eight files in GPU_OUT, what a device call brings back.
gpu-families: gpu-families-check gpu-families-bench
gpu-families-check:
	@mkdir -p $(GPU_OUT)
	-$(MAKE) --no-print-directory gpu-fp8-check gpu-fp8norms-check gpu-fp8gemm-check gpu-moe-check gpu-sampling-check \
	  FP8_CHECK_S=95 FP8NORMS_CHECK_S=70 FP8GEMM_CHECK_S=95 MOE_CHECK_S=95 SAMPLING_CHECK_S=110
	@ls -l $(GPU_OUT)
gpu-families-bench:
	@mkdir -p $(GPU_OUT)
	-$(MAKE) --no-print-directory gpu-fp8-bench gpu-fp8gemm-bench gpu-moe-bench gpu-sampling-bench \
	  FP8_BENCH_S=60 FP8GEMM_BENCH_S=120 MOE_S=120 SAMPLING_S=150
	@ls -l $(GPU_OUT)

# A Hugging Face Llama (4 layers, Llama-3-8B shapes): stock, lazyops.transformers.patch, liger-kernel's patch;
# results/<gpu>/hf.{md,json}. One device call of a few minutes (liger-kernel's wheel installed first).
HF_S ?= 540
gpu-hf:
	$(call limit,$(HF_S)) $(PYTHON) benchmarks/bench_layer.py --hf --out $(GPU_OUT)

# lazyops tune on the Llama decoder layer's trace (twice: the second run checks that the choices reproduce), then the
# layer run by the plan beside each backend's: results/<gpu>/tune.{md,json}, tune_layer.*, the trace and both plans.
# One device call of a few minutes. TUNE passes options: `make gpu-tune TUNE="--smoke --device cpu --out /tmp/t"` runs
# the same steps on a CPU with tiny shapes (tests/plan/test_tune_script.py); TUNE="--fp8 block,channel" traces, tunes
# and times the fp8 layers' kernels too (matmul_fp8_tl's backends chosen per configuration, issue 35).
gpu-tune:
	$(PYTHON) benchmarks/bench_tune.py $(TUNE)

# Correctness on the GPU, one device call: every GPU test (`-m gpu`: the conformance kit over each GPU backend, one
# case per configuration class; the offsets past 2**31; TileLang's attention against torch), the attention kernels'
# own tests, a decoder block compiled and exported, the example engine against Hugging Face and in a CUDA graph, the
# CUDA-only tests of the kernel suite (TMA, launches, call depth), the plans. The log, headed by the command, the date
# and the device, is GPU_OUT/GPU_CHECK_NAME.md, written as the steps run; each step stops after its limit (pytest
# then prints its summary and slowest tests; the log says "exit status 124"). GPU_SELECT: pytest options for the
# `-m gpu` step (`-k triton`); GPU_CONFORMANCE_EXAMPLES=N: N drawn cases a kernel instead of one per class.
GPU_CHECK ?= tests/kernels/test_paged_attention.py tests/kernels/test_triton_matmul_tma.py \
	tests/kernels/test_triton_launch.py tests/kernels/test_call_depth.py tests/examples tests/plan \
	tests/kernels/test_compile.py::test_a_decoder_block_compiles_fullgraph_and_matches_eager \
	tests/kernels/test_compile.py::test_a_decoder_block_exports
GPU_TESTS_S ?= 300
GPU_CHECK_S ?= 170
GPU_EXAMPLE_S ?= 50
GPU_CONFORMANCE_EXAMPLES ?=
GPU_SELECT ?=
GPU_CHECK_NAME ?= gpu-check
PYTEST_GPU = $(PYTHON) -m pytest -q -rfEs --durations=25 -p no:cacheprovider
# `$(call gpu_pytest_log,TITLE,TARGET,FILE,SECONDS,PYTEST ARGUMENTS)`: pytest on the device, stopped after SECONDS,
# its output headed by the command, the date and the device and written to GPU_OUT/FILE as it runs
define gpu_pytest_log
mkdir -p $(GPU_OUT); { echo "# $(1)"; echo; echo "Made by \`make $(2)\` on $$(date -u +%FT%TZ); do not edit, rerun it."; \
  echo "Device: $$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $$($(PYTHON) -c \
  'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)')."; echo; echo '```'; \
  echo '$$ pytest$(5)   # limit $(4) s'; SECONDS=0; $(call limit,$(4)) $(PYTEST_GPU)$(5) 2>&1; \
  echo "exit status $$? after $$SECONDS s"; echo '```'; } | tee $(GPU_OUT)/$(3)
endef
# Issue 33's kernel items on the device, one call of about 3 minutes: the paged kernels' conformance over each GPU
# backend (one case per configuration class), their own GPU tests (a declined head dim runs from torch, index
# dtypes, meta), the factory-time declines of every kernel and the paged kernels' input tests; the log is
# GPU_OUT/gpu-kernel-defects.md (each step stopped at its limit: 120 + 45 + 30 s). Nothing is timed: the fixes touch
# refusals and factories, not launches.
gpu-kernel-defects:
	$(MAKE) gpu-check GPU_SELECT="-k 'paged_attention or kv_cache_write or paged_inputs'" \
	  GPU_TESTS_S=120 GPU_CHECK_S=45 GPU_EXAMPLE_S=30 \
	  GPU_CHECK="tests/kernels/test_factory_declines.py tests/kernels/test_paged_inputs.py" \
	  GPU_CHECK_NAME=gpu-kernel-defects

gpu-check:
	@mkdir -p $(GPU_OUT)
	{ echo "# GPU checks"; echo; echo "Made by \`make gpu-check GPU_CONFORMANCE_EXAMPLES=$(GPU_CONFORMANCE_EXAMPLES)" \
	  "GPU_SELECT='$(GPU_SELECT)' GPU_CHECK='$(GPU_CHECK)' GPU_CHECK_NAME=$(GPU_CHECK_NAME)\` on $$(date -u +%FT%TZ); do not edit, rerun the command."; \
	  echo "Device: $$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $$($(PYTHON) -c \
	  'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)')."; echo; echo '```'; \
	  echo "\$$ pytest -m gpu tests $(GPU_SELECT)   # limit $(GPU_TESTS_S) s"; SECONDS=0; \
	  GPU_CONFORMANCE_EXAMPLES=$(GPU_CONFORMANCE_EXAMPLES) $(call limit,$(GPU_TESTS_S)) $(PYTEST_GPU) -m gpu tests $(GPU_SELECT) 2>&1; \
	  echo "exit status $$? after $$SECONDS s"; \
	  $(if $(strip $(GPU_CHECK)),echo '$$ pytest $$GPU_CHECK   # limit $(GPU_CHECK_S) s'; SECONDS=0; \
	  $(call limit,$(GPU_CHECK_S)) $(PYTEST_GPU) $(GPU_CHECK) 2>&1; echo "exit status $$? after $$SECONDS s";) \
	  echo '$$ python examples/generate.py --tokens 16   # limit $(GPU_EXAMPLE_S) s'; SECONDS=0; \
	  $(call limit,$(GPU_EXAMPLE_S)) $(PYTHON) examples/generate.py --tokens 16 2>&1 | tail -n 8; \
	  echo "exit status $${PIPESTATUS[0]} after $$SECONDS s"; echo '```'; \
	} > $(GPU_OUT)/$(GPU_CHECK_NAME).md

# The old scripts' result files (their first line names the deleted script) and what replaces each: deleted once the
# replacement exists, made by today's script (its header names a bench_*.py or make gpu-check). gemm.md and layer.md
# are rewritten in place; multi_gpu.md stays until a run on two GPUs; sweeps/ holds the GEMM sweeps that
# tests/kernels/gemm_sweeps.py reads.
SUPERSEDED = compile_block:gpu-check conformance:gpu-check kernels_host:kernels kernels_same_bytes:kernels \
	kernels_stream:kernels kernels_stream_triton_rmsnorm_fp8:kernels layer_ceiling:layer torch_backend:kernels \
	wrapper_cost:host
RESULTS = benchmarks/results/h200
gpu-prune:
	@for pair in $(SUPERSEDED); do old=$(RESULTS)/$${pair%%:*}.md; new=$(RESULTS)/$${pair##*:}.md; \
	  if [ -f "$$old" ] && [ -f "$$new" ] && head -n 4 "$$new" | grep -Eq 'benchmarks/bench_[a-z_]+\.py|make gpu-check'; \
	  then git rm -q "$$old" && echo "deleted $$old ($$new replaces it)"; \
	  elif [ -f "$$old" ]; then echo "kept $$old: $$new is not yet made by today's scripts"; fi; done

cpu-results:
	$(PYTHON) benchmarks/bench_host.py
	$(PYTHON) benchmarks/bench_kernels.py --backend torch --dtypes float32,float16,bfloat16 --tokens 1,128,1024 \
		--modes stream --name torch_backend
	$(PYTHON) benchmarks/bench_gemm.py --backend torch --dtypes float32,float16,bfloat16 --shapes 1024x1024 --tokens 1,128,1024 \
		--no-cube --name torch_backend_matmul
