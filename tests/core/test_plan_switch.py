"""A plan entry's token switch (issue 33.1): its backend is checked as the entry's choice is (unknown, installed but
unable to run here, declining the configuration: said once and every call runs from the choice; under
``LAZYOPS_PLAN_STRICT=1`` a ``ConfigError``), strict mode is obeyed, keywords pass through the switched call, and the
token count is the product of the leading dimensions. Fresh interpreters, with the fake ports of
test_plans_in_resolution ("left" marks 1.0 and declines n > 128, "right" marks 2.0)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from test_plans_in_resolution import PORT, RUN, ports, write_plan

from fresh_interpreter import run_python
from lazyops import _api, _plan
from lazyops.specs import spec
from lazyops.specs._engine import token_count

SWITCHED = "switches rmsnorm_tl(n={n}, dtype=torch.float32, eps=1e-06) to {backend!r} below 8 tokens"


def idle_port(fake_backends) -> None:
    """A backend "idle" that is installed and exports rmsnorm_tl, but cannot run here (as TileLang without a GPU)."""
    directory = fake_backends.root / "idle_port"
    directory.mkdir()
    source = PORT.format(supports="None", mark=3.0) + "\ndef unavailable_reason():\n    return 'no such device here'\n"
    (directory / "__init__.py").write_text(textwrap.dedent(source))
    fake_backends.register("idle", "idle_port", "idle-port")


@pytest.mark.parametrize(
    ("backend", "n", "why"),
    [
        ("nosuch", 64, "'nosuch' is not installed"),
        ("idle", 64, "backend 'idle' cannot run here: no such device here"),
        ("left", 256, "'left' declines it (rows of up to 128 features)"),
    ],
    ids=["unknown", "cannot-run-here", "declines"],
)
def test_a_switch_to_a_backend_that_cannot_serve_is_said_once_and_the_choice_runs(
    fake_backends, tmp_path, backend, n, why
):
    ports(fake_backends)
    idle_port(fake_backends)
    plan = write_plan(
        fake_backends, tmp_path, [(n, "right", (8, backend))], backends=("torch", "left", "right", "idle")
    )
    result = run_python(
        RUN + f"print(mark({n}, tokens=4), mark({n}, tokens=8), mark({n}, tokens=4))",
        fake_backends.env(LAZYOPS_PLAN=plan),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2.0", "2.0", "2.0"], "every call runs from the plan's choice"
    lines = [line for line in result.stderr.splitlines() if SWITCHED.format(n=n, backend=backend) in line]
    assert len(lines) == 1 and why in lines[0] and "runs from the plan's choice 'right'" in lines[0], result.stderr
    strict = run_python(
        RUN + f"print(mark({n}, tokens=4))", fake_backends.env(LAZYOPS_PLAN=plan, LAZYOPS_PLAN_STRICT="1")
    )
    assert strict.returncode != 0 and "ConfigError" in strict.stderr and "LAZYOPS_PLAN_STRICT=1" in strict.stderr
    assert SWITCHED.format(n=n, backend=backend) in strict.stderr, strict.stderr


def test_a_choice_that_cannot_run_here_is_said_once_and_resolves_as_without_a_plan(fake_backends, tmp_path):
    """What the switch is held to: the choice itself, installed but unable to run here, raised BackendError."""
    ports(fake_backends)
    idle_port(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(64, "idle", None)], backends=("torch", "left", "right", "idle"))
    result = run_python(RUN + "print(mark(64))", fake_backends.env(LAZYOPS_BACKEND="right", LAZYOPS_PLAN=plan))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2.0"]
    assert "names 'idle' for rmsnorm_tl(n=64" in result.stderr and "cannot run here" in result.stderr


def test_strict_mode_never_runs_a_switch_outside_the_selected_backend(fake_backends, tmp_path):
    ports(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(64, "torch", (8, "left"))])
    result = run_python(
        RUN + "print(mark(64, tokens=4), mark(64, tokens=8))",
        fake_backends.env(LAZYOPS_BACKEND="torch", LAZYOPS_STRICT="1", LAZYOPS_PLAN=plan),
    )
    assert result.returncode == 0, result.stderr
    assert "1.0" not in result.stdout.split(), "a 4-token call launched the switch's backend under strict mode"
    assert SWITCHED.format(n=64, backend="left") in result.stderr and "outside the strict chain" in result.stderr


def test_the_token_count_is_the_product_of_the_leading_dimensions(fake_backends, tmp_path):
    ports(fake_backends)
    plan = write_plan(fake_backends, tmp_path, [(64, "right", (8, "left"))])
    script = """
import torch, lazyops
kernel = lazyops.rmsnorm_tl(64, torch.float32)
for shape in ((1, 64, 64), (1, 4, 64), (2, 4, 64), (7, 1, 64)):
    print(float(kernel(torch.randn(shape), torch.randn(64)).flatten()[0]))
"""
    result = run_python(script, fake_backends.env(LAZYOPS_PLAN=plan))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2.0", "1.0", "2.0", "1.0"]  # 64, 4, 8 and 7 tokens


def test_keywords_pass_through_a_switched_call(fake_backends, tmp_path):
    """A switched ``kv_cache_write_tl`` with an fp8 cache takes ``k_scale=`` and ``v_scale=`` on both sides."""
    config = spec("kv_cache_write_tl").bind(2, 8, torch.float32, block_size=4, cache_dtype=torch.float8_e4m3fn)
    environment = _plan.environment_here({"torch": _api.backend_origins()["torch"]})
    candidates = {"torch": _plan.Candidate({1: 1.0})}
    entry = _plan.Entry("kv_cache_write_tl", _plan.config_fields(config), config.label, "torch", None, candidates)
    entry.switch = _plan.Switch(3, "torch")
    plan = _plan.Plan("2026-12-01T00:00:00", "a test", environment, {"method": "host", "tokens": [1]}, [entry])
    _plan.save(plan, tmp_path / "plan.json")
    script = """
import torch, lazyops
kernel = lazyops.kv_cache_write_tl(2, 8, torch.float32, block_size=4, cache_dtype=torch.float8_e4m3fn)
for tokens in (2, 5):  # under the switch's 3 tokens, and from there up
    key, value = torch.randn(tokens, 2, 8), torch.randn(tokens, 2, 8)
    caches = [torch.zeros(4, 4, 2, 8, dtype=torch.float8_e4m3fn) for _ in range(2)]
    scale = torch.full((1,), 0.5)
    key_cache, _ = kernel(key, value, *caches, torch.arange(tokens), k_scale=scale, v_scale=scale)
    torch.testing.assert_close(key_cache.view(-1, 2, 8)[:tokens].float() * 0.5, key, rtol=0.07, atol=0.02)
print("ok")
"""
    result = run_python(script, fake_backends.env(LAZYOPS_PLAN=str(tmp_path / "plan.json")))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok"] and "the plan in force" not in result.stderr, result.stderr


def test_a_paged_kernel_counts_tokens_not_heads():
    """``key[T, Hk, D]``, ``[T, Hk*D]`` and ``[1, T, Hk*D]`` are each T tokens; rope counts its positions."""
    kv = spec("kv_cache_write_tl")
    config = kv.bind(2, 8, torch.float32, block_size=4)
    for shape in ((5, 2, 8), (5, 16), (1, 5, 16)):
        assert token_count(kv, config, torch.empty(shape), torch.empty(shape)) == 5, shape
    rope = spec("rope_tl")
    positions = torch.zeros(2, 3, dtype=torch.int64)
    assert token_count(rope, rope.bind(8, torch.float32), positions, torch.empty(2, 3, 16), torch.empty(2, 3, 16)) == 6
