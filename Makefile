# The repository's tasks. `make test` and `make lint` run anywhere; `make gpu-results` on the H200 (../shared/GPU.md:
# TileLang's and liger-kernel's wheels installed first), `make cpu-results` on the 2-core CPU machine. Each result file
# names the command that made it, so one file is remade by running that command alone.

SHELL := /bin/bash
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
# the checkout's lazyops, after whatever PYTHONPATH already names (the H200's wheel folder first)
export PYTHONPATH := $(if $(PYTHONPATH),$(PYTHONPATH):)$(CURDIR)/src

.PHONY: help test lint gpu-results gpu-kernels gpu-gemm gpu-layer gpu-host gpu-hf gpu-tune gpu-check gpu-attention cpu-results

help:
	@echo "make test         the whole test suite (CI: bash scripts/test.sh installs, lints, then runs it)"
	@echo "make lint         ruff and ruff format on src/ tests/ benchmarks/ examples/, mypy on src/"
	@echo "make gpu-results  every GPU result file into benchmarks/results/<gpu>/ (about 8 minutes on one H200)"
	@echo "make gpu-tune     lazyops tune on the decoder layer's trace, twice, then the layer by its plan (GPU)"
	@echo "make gpu-check    every GPU test, the example engine: results/<gpu>/gpu-check.md (GPU)"
	@echo "make gpu-attention  paged attention checked and timed against SDPA (GPU)"
	@echo "make cpu-results  the CPU result files into benchmarks/results/cpu/"

test:
	$(PYTHON) -m pytest

lint:
	$(PYTHON) -m ruff check src tests benchmarks examples
	$(PYTHON) -m ruff format --check src tests benchmarks examples
	$(PYTHON) -m mypy src

# In this order so that an interrupted run has the goals' figures first: the memory-bound kernels (stream 1024, 8192,
# 32768; CUDA graphs 1, 1024; host at one token), the GEMM grid, the decoder layer and its bound, the host's per-call
# costs. Each part also runs alone (`make gpu-kernels`, then `make gpu-gemm gpu-layer gpu-host`: two device calls of
# under 10 minutes each), and each script rewrites its files as it goes, so a run cut short keeps what it measured.
# Then the superseded files of the old scripts (named in each one's first line) can be deleted.
gpu-results: gpu-kernels gpu-gemm gpu-layer gpu-host

gpu-kernels:
	$(PYTHON) benchmarks/bench_kernels.py

gpu-gemm:
	$(PYTHON) benchmarks/bench_gemm.py

gpu-layer:
	$(PYTHON) benchmarks/bench_layer.py --ceiling

gpu-host:
	$(PYTHON) benchmarks/bench_host.py --parts calls

# A Hugging Face Llama (4 layers, Llama-3-8B shapes): stock, lazyops.transformers.patch, liger-kernel's patch;
# results/<gpu>/hf.{md,json}. One device call of a few minutes (liger-kernel's wheel installed first).
gpu-hf:
	$(PYTHON) benchmarks/bench_layer.py --hf

# lazyops tune on the Llama decoder layer's trace (twice: the second run checks that the choices reproduce), then the
# layer run by the plan beside each backend's: results/<gpu>/tune.{md,json}, tune_layer.*, the trace and both plans.
# One device call of a few minutes. TUNE passes options: `make gpu-tune TUNE="--smoke --device cpu --out /tmp/t"` runs
# the same steps on a CPU with tiny shapes (tests/plan/test_tune_script.py).
gpu-tune:
	$(PYTHON) benchmarks/bench_tune.py $(TUNE)

cpu-results:
	$(PYTHON) benchmarks/bench_host.py
	$(PYTHON) benchmarks/bench_kernels.py --backend torch --dtypes float32,float16,bfloat16 --tokens 1,128,1024 \
		--modes stream --name torch_backend
	$(PYTHON) benchmarks/bench_gemm.py --backend torch --dtypes float32,float16,bfloat16 --shapes 1024x1024 --tokens 1,128,1024 \
		--no-cube --name torch_backend_matmul

# Correctness on the H200: every GPU test (`-m gpu`: the conformance kit over each GPU backend, the offsets past 2**31,
# TileLang's attention against torch), the attention kernels' own tests, the example engine against Hugging Face and
# in a CUDA graph, and the CUDA-only tests of the kernel suite (TMA, launches, call depth). The log, headed by the
# command, the date and the device, is benchmarks/results/<gpu>/gpu-check.md.
GPU_CHECK ?= tests/kernels/test_paged_attention.py tests/kernels/test_triton_matmul_tma.py \
	tests/kernels/test_triton_launch.py tests/kernels/test_call_depth.py tests/examples tests/plan
# Each of the three steps is interrupted after GPU_CHECK_TIMEOUT seconds (pytest then still prints its summary and
# slowest tests; the log says "exit status 124"). A device call is at most 10 minutes, and on 2026-12-02 the GPU tests
# alone did not finish in 170 s (TileLang compiles each drawn configuration): split the run with GPU_SELECT, pytest
# options for the `-m gpu` step, e.g. `make gpu-check GPU_SELECT="-k triton" GPU_CHECK= GPU_CHECK_NAME=gpu-check-triton`
# (GPU_CHECK_NAME: the result file's stem, so that the parts of a split run do not overwrite each other).
GPU_CHECK_TIMEOUT ?= 540
GPU_CONFORMANCE_EXAMPLES ?= 6
GPU_SELECT ?=
GPU_CHECK_NAME ?= gpu-check
STOP_AFTER = timeout -s INT -k 30 $(GPU_CHECK_TIMEOUT)
gpu-check:
	@mkdir -p benchmarks/results/h200
	{ echo "# GPU checks"; echo; echo "Made by \`make gpu-check GPU_CONFORMANCE_EXAMPLES=$(GPU_CONFORMANCE_EXAMPLES)" \
	  "GPU_SELECT='$(GPU_SELECT)' GPU_CHECK='$(GPU_CHECK)' GPU_CHECK_NAME=$(GPU_CHECK_NAME)\` on $$(date -u +%FT%TZ); do not edit, rerun the command."; \
	  echo "Device: $$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $$($(PYTHON) -c \
	  'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)')."; echo; echo '```'; \
	  echo '$$ pytest -m gpu tests $$GPU_SELECT'; GPU_CONFORMANCE_EXAMPLES=$(GPU_CONFORMANCE_EXAMPLES) $(STOP_AFTER) \
	  $(PYTHON) -m pytest -m gpu -q -rfEs --durations=15 -p no:cacheprovider tests $(GPU_SELECT) 2>&1 | tail -n 150; \
	  echo "exit status $${PIPESTATUS[0]}"; \
	  $(if $(strip $(GPU_CHECK)),echo '$$ pytest $$GPU_CHECK'; $(STOP_AFTER) $(PYTHON) -m pytest -q -rfEs --durations=15 \
	  -p no:cacheprovider $(GPU_CHECK) 2>&1 | tail -n 80; echo "exit status $${PIPESTATUS[0]}";) \
	  echo '$$ python examples/generate.py --tokens 16'; $(STOP_AFTER) \
	  $(PYTHON) examples/generate.py --tokens 16 2>&1 | tail -n 8; echo "exit status $${PIPESTATUS[0]}"; echo '```'; \
	} > benchmarks/results/h200/$(GPU_CHECK_NAME).md

# Attention over a paged KV cache (issue 29's goals): each backend's kernels checked, then decode and prefill against
# SDPA's flash and cuDNN backends, in one run of about 5 minutes: benchmarks/results/<gpu>/attention.{md,json}.
# ATTENTION passes options: `make gpu-attention ATTENTION=--quick` (about 2 minutes), `ATTENTION=--sweep`.
gpu-attention:
	$(PYTHON) benchmarks/bench_attention.py $(ATTENTION)
