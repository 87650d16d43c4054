"""Every script of ``benchmarks/`` run with ``--smoke`` on this CPU, so that none of them can rot: tiny shapes, one
round, the torch backend (and Triton in its interpreter where it is cheap). What is checked is that each run ends
well and writes result files that say how they were made; no figure is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_scripts import BENCHMARKS, load

harness = load("bench_harness")


def smoke(script: str, out: Path, *args: str) -> dict:
    """``python benchmarks/<script> --smoke --device cpu --out <out> <args>``: its result JSON, after checking the
    run ended well and both files carry the command, date, device, versions and commit."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(BENCHMARKS.parent / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    env["TRITON_INTERPRET"] = "1"
    command = [sys.executable, str(BENCHMARKS / script), "--smoke", "--device", "cpu", "--out", str(out), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    written = sorted(out.rglob("*.json"))
    assert len(written) == 1, written
    payload = json.loads(written[0].read_text())
    markdown = written[0].with_suffix(".md").read_text()
    environment = payload["environment"]
    assert f"benchmarks/{script} --smoke" in environment["command"] and environment["command"] in markdown
    for fact in ("date", "device", "commit"):
        assert environment[fact] and str(environment[fact]) in markdown
    assert environment["versions"]["torch"] in markdown
    return payload


def test_kernels_sampling(tmp_path):
    """--sampling: the sampling family at batches of requests, beside vLLM's torch path and torch.multinomial."""
    rows = smoke("bench_kernels.py", tmp_path, "--sampling", "--backend", "torch", "--modes", "stream")["rows"]
    impls = {(row["kernel"], row["impl"]) for row in rows}
    assert {
        ("sample V=128256", "vLLM torch path"),
        ("sample V=128256", "torch.multinomial"),
        ("apply_penalties V=128256", "lazyops torch"),
        ("sample+logprobs V=128256", "lazyops torch"),
        ("apply_penalties+bias+mask V=128256", "lazyops torch"),
    } <= impls
    assert not [row.get("error") for row in rows if row.get("error")]


def test_kernels_moe(tmp_path):
    """--moe: fused_moe_tl at Mixtral-8x7B's and Qwen3-30B-A3B's experts beside torch._grouped_mm, routed evenly so
    that a row's bytes are those of the experts the call reads; refused beside --sampling, and --tiles short of a
    tile set's 6 fields refused."""
    payload = smoke("bench_kernels.py", tmp_path, "--moe", "--backend", "torch", "--modes", "stream")
    rows, configs = payload["rows"], payload["environment"]["configs"]
    impls = {(row["kernel"], row["impl"]) for row in rows}
    for model in ("Mixtral-8x7B", "Qwen3-30B-A3B"):
        assert {(f"fused_moe {model}", impl) for impl in ("lazyops torch", "torch._grouped_mm", "torch eager")} <= impls
    assert not [row.get("error") for row in rows if row.get("error")]
    assert sorted(configs) == ["fused_moe Mixtral-8x7B", "fused_moe Qwen3-30B-A3B"]
    assert all(config.endswith(" with routing=balanced") for config in configs.values()), configs
    both = [sys.executable, str(BENCHMARKS / "bench_kernels.py"), "--moe", "--sampling", "--device", "cpu"]
    refused = subprocess.run(both, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--sampling and --moe are two runs" in refused.stderr
    short = [sys.executable, str(BENCHMARKS / "bench_kernels.py"), "--moe", "--tiles", "16,32,64", "--device", "cpu"]
    refused = subprocess.run(short, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "sets of 6 integers" in refused.stderr


def test_kernels(tmp_path):
    rows = smoke("bench_kernels.py", tmp_path, "--backend", "torch,triton", "--kernels", "rmsnorm,rope")["rows"]
    ours = [row for row in rows if row["impl"] in ("lazyops torch", "lazyops triton", "torch op", "torch eager")]
    assert {(row["kernel"], row["impl"], row["method"]) for row in ours} == {
        (kernel, impl, method)
        for kernel in ("rmsnorm", "rope")
        for impl in ("lazyops torch", "lazyops triton", "torch op", "torch eager")
        for method in ("stream", "host")
    }
    assert all("error" not in row and row["low_us"] <= row["us"] <= row["high_us"] for row in ours)
    copies = [row for row in rows if row["impl"] == "copy of the same bytes" and row["method"] == "stream"]
    assert {row["kernel"] for row in copies} == {"rmsnorm", "rope"} and all(row["rate"] > 0 for row in copies)


def test_gemm_grid_and_a_sweep(tmp_path):
    rows = smoke("bench_gemm.py", tmp_path / "grid", "--backend", "torch")["rows"]
    assert {row["impl"] for row in rows} == {"a @ b", "lazyops torch"}
    assert all("error" not in row and row["us"] > 0 and row["vs_cublas"] > 0 for row in rows)
    tile = "block_m=16,block_n=32,block_k=32,num_warps=4,num_stages=2,split=2"
    options = ["--sweep", "triton", "--backend", "triton", "--tokens", "3", "--shapes", "64x96", "--tiles", tile]
    sweep = smoke("bench_gemm.py", tmp_path / "sweep", *options)["rows"]
    (candidate,) = [row for row in sweep if row["kind"] == "candidate"]
    assert candidate["block_n"] == 32 and candidate["split"] == 2 and "error" not in candidate and candidate["us"] > 0


def test_gemm_fp8_sweep_of_triton_tiles(tmp_path):
    """``bench_gemm.py --fp8 ... --sweep triton --tiles``: rows of ``configs/matmul_fp8.json`` timed on the fp8 cells
    (Triton's interpreter), each checked against the dequantised product first."""
    tile = "block_m=16,block_n=32,num_warps=4,num_stages=3"
    options = ["--fp8", "rowwise,block", "--sweep", "triton", "--backend", "torch", "--tokens", "17"]
    sweep = smoke("bench_gemm.py", tmp_path, *options, "--shapes", "160x256", "--tiles", tile)["rows"]
    candidates = [row for row in sweep if row["kind"] == "candidate"]
    assert sorted(row["scales"] for row in candidates) == ["block", "rowwise"]
    assert all(row["block_n"] == 32 and "error" not in row and row["us"] > 0 for row in candidates), candidates


def test_host(tmp_path):
    rows = smoke("bench_host.py", tmp_path)["rows"]
    parts = {row["part"] for row in rows}
    assert parts == {"import", "startup", "calls"}
    calls = {row["kernel"]: row for row in rows if row["part"] == "calls"}
    assert set(calls) >= {"rmsnorm", "softmax", "layernorm", "rope", "matmul"}
    for row in calls.values():
        assert row["no-op launch"] > 0 and row["torch backend"] > 0 and row["through the operator"] > 0, row
    assert calls["softmax"]["lightest checked wrapper"] > 0


def test_layer_with_its_ceiling(tmp_path):
    rows = smoke("bench_layer.py", tmp_path, "--backend", "torch", "--ceiling")["rows"]
    timed = [row for row in rows if row["kind"] != "bound"]
    assert {row["workload"] for row in timed} == {"prefill-16", "decode-2"}
    assert all("error" not in row and row["us"] > 0 for row in timed), [row for row in timed if "error" in row]
    judged = [row for row in timed if row["kind"] != "skeleton"]
    assert judged and all(row["error_out"] < 0.05 for row in judged)
    (bound,) = [row for row in rows if row["kind"] == "bound"]
    assert bound["workload"] == "prefill-16" and bound["bound"] > 0 and bound["floor_us"] > bound["skeleton_us"]


def test_moe_layer(tmp_path):
    """``--moe`` (issue 36): the layer with a sparse MoE block (tiny: 2 of 8 experts), torch's (torch._grouped_mm)
    and the torch backend's (moe_route_tl, fused_moe_tl) rows, each judged against the float32 layer routed as it
    routed, in a result file of the model's name."""
    payload = smoke("bench_layer.py", tmp_path, "--backend", "torch", "--moe", "qwen3-30b-a3b")
    assert (tmp_path / "layer_qwen3_30b_a3b.json").is_file() and payload["environment"]["shape"]["experts"] == 8
    timed = {(row["workload"], row["impl"]): row for row in payload["rows"]}
    impls = ("torch eager", "torch.compile", "lazyops torch", "lazyops torch + torch.compile")
    assert set(timed) == {(workload, impl) for workload in ("prefill-16", "decode-2") for impl in impls}
    assert all("error" not in row and row["us"] > 0 and row["error_out"] < 0.05 for row in timed.values()), timed


def test_the_layer_times_only_the_rows_asked_for_and_refuses_an_unknown_one(tmp_path):
    """``--only`` (a row that poisons the device is found by leaving rows out: issue 36's MoE layer on an H100)."""
    only = ("--backend", "torch", "--moe", "qwen3-30b-a3b", "--no-compile", "--workloads", "decode-2")
    payload = smoke("bench_layer.py", tmp_path, *only, "--only", "lazyops torch", "--only", "torch eager")
    assert sorted(row["impl"] for row in payload["rows"]) == ["lazyops torch", "torch eager"]
    command = [sys.executable, str(BENCHMARKS / "bench_layer.py"), "--smoke", "--device", "cpu", *only]
    result = subprocess.run(
        [*command, "--only", "torch eagre"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent / "src")},
    )
    assert result.returncode != 0 and "--only: torch eagre not among this run's rows: torch eager" in result.stderr


def test_the_moe_layers_torch_experts_are_the_specs():
    """torch's MoE rows (the timed peer: torch._grouped_mm over the assignments sorted by expert, in bf16) compute
    what ``fused_moe_tl``'s spec does, with experts that receive no token and one that receives most."""
    import torch

    from lazyops.specs import spec

    layer = load("bench_layer")
    shape = layer.SMOKE_MOE
    ops = layer.torch_ops(shape, layer.sdpa_attention(shape, torch.bfloat16, "cpu"))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, shape.hidden, generator=g)
    w13 = torch.randn(shape.experts, 2 * shape.mlp, shape.hidden, generator=g) / 16
    w2 = torch.randn(shape.experts, shape.hidden, shape.mlp, generator=g) / 8
    logits = torch.randn(5, shape.experts, generator=g)
    logits[:, 3] += 10  # every token's first expert: 3
    weights, ids = ops.route(logits)
    assert ids[:, 0].tolist() == [3] * 5 and torch.allclose(weights.sum(-1), torch.ones(5))
    got = ops.experts(*(t.bfloat16() for t in (x, w13, w2)), weights, ids)
    config = spec("fused_moe_tl").bind(shape.hidden, shape.mlp, shape.experts, shape.top_k, torch.bfloat16)
    (expected,) = spec("fused_moe_tl").reference(config, x, w13, w2, weights, ids.int())
    assert got.dtype == torch.bfloat16 and (got.float() - expected).norm() / expected.norm() < 2e-2


def test_the_moe_layer_is_judged_as_routed_but_only_to_the_routers_top_k():
    """A layer is judged against the float32 layer routed to the experts it chose (a bf16 near-tie may swap one),
    but experts outside the float32 top-k, or one chosen twice, make its row a wrong result."""
    import torch

    routing = load("bench_layer").routing
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0 + 1e-4]])
    weights, ids = routing(logits, 2)
    assert ids.tolist() == [[0, 3]] and torch.allclose(weights.sum(-1), torch.ones(1))
    swapped, kept = routing(logits, 2, torch.tensor([[0, 2]], dtype=torch.int32))
    assert kept.tolist() == [[0, 2]] and torch.allclose(swapped, weights, atol=1e-4)
    for wrong in ([[1, 2]], [[0, 0]]):
        with pytest.raises(ValueError, match="wrong result"):
            routing(logits, 2, torch.tensor(wrong))


def test_layer_fp8(tmp_path):
    """``bench_layer.py --fp8 block,channel --no-compile`` (the make gpu-fp8layer run, tiny): the fp8 layers timed
    beside the bf16 ones, no torch.compile twin, each judged against the float32 layer, the goal's table written."""
    payload = smoke("bench_layer.py", tmp_path, "--backend", "torch", "--fp8", "block,channel", "--no-compile")
    rows = payload["rows"]
    assert not [row for row in rows if "compile" in row["impl"]]
    fp8 = [row for row in rows if row["kind"] == "fp8"]
    assert {row["impl"] for row in fp8} == {"lazyops torch, fp8 block", "lazyops torch, fp8 channel"}
    assert all("error" not in row and row["us"] > 0 and row["error_out"] > 0 for row in fp8), fp8
    assert "the fastest bf16 layer" in (tmp_path / "layer.md").read_text()


def test_the_layer_takes_each_backends_attention_from_one_place(monkeypatch):
    """The seam for attention kernels: every layer of a backend, its compiled row and its skeleton get the attention
    ``attention_for`` gives that backend."""
    layer = load("bench_layer")

    asked = []

    def attention_for(backend, shape, dtype, device):
        asked.append(backend)
        return layer.sdpa_attention(shape, dtype, device)

    monkeypatch.setattr(layer, "attention_for", attention_for)
    impls = layer.implementations(layer.SMOKE, "bfloat16", "cpu", {"torch": None, "other": None}, ceiling=True)
    monkeypatch.setattr(
        layer, "lazyops_ops", lambda backend, shape, dtype, attention: layer.torch_ops(shape, attention)
    )
    for impl in impls:
        impl.ops()
    assert sorted(set(asked), key=str) == sorted({None, "torch", "other"}, key=str)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_paged_cache_holds_the_contiguous_numbers_in_scattered_contiguous_blocks(batch):
    """The layout bench_attention.py and bench_layer.py time lazyops' attention on. At batch 1 the block reshape is a view:
    the layer's cache was then not contiguous and the kernels refused it (a decode-1 row was an error)."""
    import torch

    k = torch.randn(batch, 2, 10, 8)
    paged, _, table, lengths, starts = harness.paged(k, k, 4, new=2)
    assert paged.is_contiguous() and paged.shape == (batch * 3, 4, 2, 8) and table.dtype == torch.int32
    assert lengths.tolist() == [10] * batch and starts.tolist() == list(range(0, 2 * batch + 1, 2))
    assert sorted(table.flatten().tolist()) == list(range(batch * 3)) != table.flatten().tolist()
    gathered = paged[table.long()].flatten(1, 2)  # [B, blocks * block, H, D], zeros past the length
    assert torch.equal(gathered[:, :10].transpose(1, 2), k) and not gathered[:, 10:].any()


def test_the_attention_goals_are_read_off_the_rows_at_the_h200s_shapes():
    """issue 29's goals as bench_attention.py states them (the GPU run has no second chance), on rows at its shapes."""
    attention = load("bench_attention")

    def row(part: str, shape: str, impl: str, us: float, kind: str = "lazyops", rate: float = 1.0) -> dict:
        return {"part": part, "shape": shape, "impl": impl, "us": us, "kind": kind, "rate": rate, "unit": "GB/s"}

    rows = [
        {"part": "check", "backend": "triton", "shape": "drawn cases", "status": "pass", "detail": "passed"},
        row("decode", "1 x 8192", "lazyops triton", 10.0),
        row("decode", "1 x 8192", "SDPA flash", 12.0, "peer"),
        row("decode", "1 x 8192", "SDPA cuDNN", 25.0, "peer"),
        row("decode", "64 x 1024", "lazyops triton", 20.0, rate=4200.0),
        row("decode", "64 x 1024", "SDPA flash", 19.0, "peer"),
        row("prefill", "1 x 8192", "lazyops triton", 100.0),
        row("prefill", "1 x 8192", "SDPA flash", 110.0, "peer"),
        row("prefill", "1 x 8192", "FlexAttention (contiguous, GQA)", 50.0, "peer"),
        row("prefill", "chunked 512 over 8192", "lazyops triton", 10.0),
        row("prefill", "chunked 512 over 8192", "lazyops triton unpaged (blocks in order)", 9.0),
    ]
    assert attention.goals(rows) == [
        "decode 1 x 8192, lazyops triton: 1.20× the best peer (SDPA flash) [goal ≥ 1.0×]; 2.50× cuDNN [goal ≥ 2×]",
        "decode 64 x 1024, lazyops triton: 0.95× the best peer (SDPA flash) [goal ≥ 1.0×]; 88 % of HBM [goal ≥ 85 %]",
        "prefill 1 x 8192, lazyops triton: 1.10× the best peer (SDPA flash) [goal ≥ 1.0×]",
        "prefill chunked 512 over 8192, lazyops triton: 0.90× its unpaged layout [goal ≥ 0.9×]",
    ]
    shape = vars(attention.LLAMA) | {"decode": None, "prefill": None}
    markdown = "\n".join(attention.render(rows, {"shape": shape, "dtype": "torch.bfloat16"}))
    assert "| 1 x 8192 | lazyops triton | 10.0 | 1.0 GB/s | 0 % | 1.20× |  |" in markdown


def test_results_are_one_row_a_line_and_name_their_command(tmp_path):
    env = {
        "command": "python x.py",
        "date": "d",
        "device": "cpu",
        "versions": {"torch": "2"},
        "python": "3",
        "commit": "c",
    }
    harness.write(tmp_path, "stem", "Title", env, [{"a": 1.123456789, "b": None}, {"a": 2}], ["body"])
    lines = (tmp_path / "stem.json").read_text().splitlines()
    assert lines[2:4] == ['{"a":1.1235},', '{"a":2}'] and json.loads("\n".join(lines))["environment"] == env
    markdown = (tmp_path / "stem.md").read_text()
    assert markdown.startswith("# Title\n") and "`python x.py`" in markdown and markdown.rstrip().endswith("body")


@pytest.mark.parametrize(
    "script",
    ["bench_attention.py", "bench_kernels.py", "bench_gemm.py", "bench_host.py", "bench_layer.py", "bench_tune.py"],
)
def test_scripts_reach_lazyops_only_through_its_public_api_and_the_harness(script):
    text = (BENCHMARKS / script).read_text()
    assert "lazyops._" not in text and "from lazyops import _" not in text


def test_layer_hugging_face(tmp_path):
    """``bench_layer.py --hf``: the stock model, lazyops' patch (liger-kernel where installed), every workload timed
    or its row saying why not, the patched model's logits judged against stock's first."""
    pytest.importorskip("transformers")
    rows = smoke("bench_layer.py", tmp_path, "--hf")["rows"]
    timed = {(row["workload"], row["impl"]): row for row in rows}
    for workload in ("prefill-16", "decode-1", "decode-32"):
        for impl in ("stock (SDPA)", "lazyops patch (lazyops attention)"):
            assert timed[workload, impl]["us"] > 0 and "error" not in timed[workload, impl], timed[workload, impl]
    batch = {row["impl"]: row for row in rows if row["workload"] == "generate_batch" and "liger" not in row["impl"]}
    assert len(batch) == 3 and all(row["tokens_per_s"] > 0 for row in batch.values()), batch
    # rows named for what runs: the patched model's modules keep lazyops' attention, stock's run what was set
    assert "lazyops" in batch["lazyops patch, its attention (lazyops)"]["attention"], batch
    assert "lazyops" not in batch["stock, attention paged|eager"]["attention"], batch


def test_an_attention_cell_whose_inputs_do_not_fit_is_a_row_and_the_run_goes_on(monkeypatch):
    """256 x 32k's keys and values (34 GB) ran an H100 out of memory on 2026-12-05 and ended the run before prefill:
    such a cell is now a row naming the error, and the cells after it are timed."""
    import torch

    attention = load("bench_attention")

    def tensors(self, batch, length, new):
        if (batch, length) == (3, 40):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 17.00 GiB")
        return torch.randn(batch, 4, new, 16), *(torch.randn(batch, 2, length, 16) for _ in range(2))

    monkeypatch.setattr(attention.Timing, "tensors", tensors)
    monkeypatch.setattr(
        attention.Timing,
        "measure",
        lambda self, part, cell, *_: [{"part": part, "shape": cell, "impl": "lazyops torch", "kind": "lazyops"}],
    )
    timing = attention.Timing("cpu", True, 1, False, attention.SMOKE, torch.float32)
    rows = [row for cell in timing.attention(["torch"]) for row in cell]
    cells = ["1 x 16", "3 x 16", "1 x 40", "3 x 40", "1 x 64", "4 x 16", "chunked 8 over 64"]
    assert [row["shape"] for row in rows] == cells
    assert [row["impl"] for row in rows if "error" in row] == ["inputs"]
    assert "OutOfMemoryError: CUDA out of memory" in rows[3]["error"]
    env = {"shape": vars(attention.SMOKE), "dtype": "torch.float32", "device": "NVIDIA H100 80GB HBM3"}
    assert "| 3 x 40 | inputs |" in "\n".join(attention.render(rows, env))


def test_the_sampler_profile_runs_on_the_host():
    """``scripts/profile_sampler.py`` (the first part of ``make gpu-sampling-paths``) in Triton's interpreter: both
    paths profiled at one small vocabulary, so that a device call does not find it broken."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(BENCHMARKS.parent / "src"), os.environ.get("PYTHONPATH", "")]),
        "TRITON_INTERPRET": "1",
    }
    script = BENCHMARKS.parent / "scripts" / "profile_sampler.py"
    command = [sys.executable, str(script), "--device", "cpu", "--vocab", "300", "--batches", "1", "--calls", "1"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "## B = 1, the split path:" in result.stdout and "## B = 1, one program a row:" in result.stdout
    # --launches: each of the split path's 18 launches timed alone, in call order
    result = subprocess.run([*command, "--launches"], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    launches = [line for line in result.stdout.splitlines() if line.startswith("launch ")]
    assert [line.split()[2].rstrip(":") for line in launches] == ["scan", *["pass"] * 16, "finish"], launches


def test_the_sampler_sass_script_compiles_a_kernel():
    """``scripts/sampler_sass.py`` (decision 015's counts) compiles the split path's scan for sm_90 on the host and
    prints its row: no conversion of a chunk-wide tensor, under this project's Triton."""
    pytest.importorskip("triton.backends.nvidia")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    script = BENCHMARKS.parent / "scripts" / "sampler_sass.py"
    result = subprocess.run(
        [sys.executable, str(script), "--kernels", "scan"], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    row = next(line for line in result.stdout.splitlines() if line.startswith("| scan |"))
    assert row.rstrip(" |").endswith("| 0"), row
