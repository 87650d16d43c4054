"""``benchmarks/tilelang_variants.py`` on a machine without a GPU: what can be known before the lead's H200 run.

Its arguments, its plan (``--dry-run``), its refusal without CUDA, and that every program it will compile (main's
frozen ones and the backend's new ones) lowers for sm_90a from the arguments it builds them with.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

import benchmark_script  # tests/benchmark_script.py


def load_script() -> ModuleType:
    return benchmark_script.load("tilelang_variants")


def test_arguments_are_checked() -> None:
    script = load_script()
    args = script.parse_args(["--out", "results", "--tokens", "1024,32768", "--kernels", "rope"])
    assert args.tokens == [1024, 32768] and args.kernels == ["rope"] and args.out == Path("results")
    for wrong in (["--out", "x", "--kernels", "softmax"], ["--out", "x", "--tokens", "0"], []):
        with pytest.raises(SystemExit) as exit_info:
            script.parse_args(wrong)
        assert exit_info.value.code == 2


def test_dry_run_lists_main_and_new_programs_of_each_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    script = load_script()
    assert script.main(["--dry-run"]) == 0
    printed = capsys.readouterr().out
    for kernel in script.KERNELS:
        assert f"{kernel}: {script.BASELINE}" in printed and f"{kernel}: new" in printed
    assert "1024, 8192, 32768" in printed


def test_refuses_clearly_without_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = load_script()
    problem = script.unavailable()
    if problem is None:
        pytest.skip("this machine can run the comparison")
    assert script.main(["--out", str(tmp_path)]) == 2
    assert "cannot run here" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "nothing is written when nothing ran"


def test_every_variant_program_lowers_for_hopper() -> None:
    tilelang = pytest.importorskip("tilelang")
    from tvm.target import Target

    from lazyops.specs import spec

    script = load_script()
    target = Target({"kind": "cuda", "arch": "sm_90a"})
    for variant in script.variants(script.KERNELS):
        example = script.benchmark_example(variant.kernel)
        config = spec(f"{variant.kernel}_tl").configure(*example.args, **example.kwargs)
        with target:
            source = tilelang.lower(variant.program(config), target=target).kernel_source
        assert "__global__" in source, variant.key
        if variant.kernel != "rope":
            assert "fp8_e4_t* __restrict__ y" in source, variant.key


def stand_in(kernel: str):
    """A CPU stand-in for a compiled TileLang kernel: the spec's float64 reference, written where the program
    writes (rope: query and key in place, as [M, heads, head_dim]; the norms: y, and add_rmsnorm_fp8's residual)."""
    import torch

    from lazyops.specs import spec

    kernel_spec = spec(f"{kernel}_tl")
    script = load_script()
    example = script.benchmark_example(kernel)
    config = kernel_spec.configure(*example.args, **example.kwargs)

    def run(*args: torch.Tensor) -> None:
        *inputs, last = args
        if kernel == "rope":
            positions, query, key, cache = args
            tokens = positions.shape[0]
            flat = (positions, query.reshape(tokens, -1), key.reshape(tokens, -1), cache)
            rotated = kernel_spec.reference(config, *(t.double() if t.is_floating_point() else t for t in flat))
            query.copy_(rotated[0].reshape(query.shape))
            key.copy_(rotated[1].reshape(key.shape))
            return
        results = kernel_spec.reference(config, *(t.double() for t in inputs))
        last.copy_(results[0].to(last.dtype))
        if kernel == "add_rmsnorm_fp8":
            inputs[1].copy_(results[1])

    return run


def test_each_variant_is_checked_through_the_spec_with_a_stand_in_kernel_on_the_cpu() -> None:
    """The plumbing the GPU run depends on: each variant's factory (the spec's wrapper around the launch the
    backend uses), check_case over the script's layouts, and the report's tables."""
    from lazyops._bench import Row

    script = load_script()
    checks = []
    for variant in script.variants(script.KERNELS):
        built = script.factory(variant, stand_in(variant.kernel), device="cpu")
        checks += script.check(variant, built, device="cpu")
    assert checks and all(entry["status"] == "pass" for entry in checks), checks
    assert {entry["layout"] for entry in checks} >= {"packed qkv", "rows padded by 64, out given"}
    rows = [
        Row("rope", script.BASELINE, "lazyops", "stream", 1024, "bfloat16", us=10.0, rate=2000.0, unit="GB/s"),
        Row("rope", "new", "lazyops", "stream", 1024, "bfloat16", us=8.0, rate=2500.0, unit="GB/s"),
        Row("rope", "copy (same bytes)", "ceiling", "copy", 1024, "bfloat16", us=5.0, rate=4000.0, unit="GB/s"),
    ]
    environment = {"date": "today", "device": "cpu", "commit": "?", "versions": {"torch": "x"}, "command": "c"}
    text = script.report(environment, checks, rows, ["rope"])
    assert "| 1024 | new | 8.0 | 2500 | 62.5% | 1.250x |" in text
    assert "| rope | new | packed qkv |" in text
