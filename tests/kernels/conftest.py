"""What every kernel test shares: the backend under test, where its tensors live, how large examples may be.

Tests take the ``kernels`` fixture, one :class:`Harness` per backend: it stands on the pytest plugin's
``lazyops_backend`` fixture, which runs each test once per backend that can run here, with that backend selected
alone and strict. Kernels are reached through the public namespace (``lazyops.rmsnorm_tl``), so a test exercises
what users get and can never silently run another backend's kernel. What a kernel is (its inputs, reference,
examples) comes from its spec (``lazyops.specs``) and the judging from the conformance kit (``lazyops.testing``):
the built-ins are checked exactly as a third-party backend checks itself, and a new kernel is tested here without
a line of test code of its own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Triton reads TRITON_INTERPRET when it decorates a kernel, that is when a kernel module is first imported, so it
# must be set before anything imports one. Only where no NVIDIA GPU is present: there the interpreter is the
# only way Triton runs at all. (Checked without importing torch, which is heavy.)
if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import lazyops
from hypothesis_profiles import examples as scaled
from lazyops import testing
from lazyops.testing.cases import examples as examples_of


@dataclass(frozen=True)
class Harness:
    """One backend as the kernel tests see it: where its tensors live and how many, how large, examples it gets."""

    backend: str
    device: str

    def factory(self, name: str) -> Callable[..., Any]:
        """``lazyops.<name>``, resolved with this backend selected alone and strict (the fixture's doing)."""
        factory = getattr(lazyops, name)
        assert lazyops.which(name).backend == self.backend, f"{name} resolved from {lazyops.which(name).backend}"
        return factory

    @property
    def on_host(self) -> bool:
        """Kernels run on the CPU (the torch backend, or Triton's interpreter at ~0.3 s a 256 x 1024 softmax)."""
        return self.device == "cpu"

    @property
    def max_elements(self) -> int:
        """The most elements one example's main input may hold (token counts are cut to fit)."""
        return 100_000 if self.on_host else 2_000_000

    def cases(self, kernel: str) -> Any:
        """``lazyops.testing.strategies.cases(kernel)``, less the configurations this backend declines (another
        backend's to serve: ``spec.implementation(supports=...)``)."""
        from lazyops import _api

        return testing.strategies.cases(kernel, _api.kernel_factory(self.backend, kernel))

    def settings(self, host_examples: int = 25, examples: int = 80) -> settings:
        """These counts under the pinned profile, in proportion under ``HYPOTHESIS_PROFILE=exhaustive``; a backend
        that declines some configurations (``kernels.cases`` filters them) is no test's defect."""
        return settings(
            max_examples=scaled(host_examples if self.on_host else examples),
            deadline=None,
            suppress_health_check=[HealthCheck.filter_too_much],
        )

    def drawn_calls(
        self, kernel: str, *, tokens: int = 6, host_examples: int = 3, examples: int = 5
    ) -> Callable[[Callable[..., None]], Callable[[], None]]:
        """Decorator: run the test on a few drawn configurations of ``kernel``, each as ``(kernel call, good
        arguments for ``tokens`` tokens (fewer when a token is wide), case)``."""
        from hypothesis import given

        from lazyops.specs import spec

        kernel_spec = spec(kernel)
        self.factory(kernel)  # a kernel this backend lacks is skipped here, as the plugin reports it

        def decorate(test: Callable[..., None]) -> Callable[[], None]:
            @self.settings(host_examples=host_examples, examples=examples)
            @given(case=examples_of(kernel_spec).cases())
            def run(case: testing.Case) -> None:
                from hypothesis import assume

                from lazyops import _api

                assume(testing.strategies.declined(_api.kernel_factory(self.backend, kernel), case) is None)
                config = kernel_spec.bind(*case.args, **case.kwargs)
                count = testing.rows(tokens, examples_of(kernel_spec).token_elements(config, case.geometry), 20_000)
                draw = testing.Inputs(case.seed, self.device)
                args = examples_of(kernel_spec).example_inputs(config, count, draw, case.geometry)
                test(self.factory(kernel)(*case.args, **case.kwargs), args, case)

            return run

        return decorate

    @property
    def wrong_device(self) -> str:
        """A device this backend's kernels must refuse (meta stands in for "not the host" under the interpreter)."""
        return "meta" if self.device == "cpu" else "cpu"


@pytest.fixture
def kernels(lazyops_backend: str) -> Harness:
    return Harness(backend=lazyops_backend, device=testing.default_device(lazyops_backend))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``kernel``: every kernel lazyops specifies (the torch backend's manifest), so a new one is tested at once."""
    if "kernel" in metafunc.fixturenames:
        from lazyops.specs import kernel_names

        metafunc.parametrize("kernel", kernel_names())


#: Threads compiling TileLang programs at once ahead of the GPU tests: each compile is mostly nvcc, a subprocess.
AHEAD_THREADS = 8


@pytest.fixture(scope="session")
def tilelang_compiled_ahead() -> None:
    """On a GPU where TileLang runs: every configuration the GPU tests build most (each kernel's one case per
    configuration class, ``lazyops.testing.class_cases``, and its bfloat16 benchmark configuration, which the
    offset tests take) compiled at the session's start, :data:`AHEAD_THREADS` at a time, into lazyops' in-process
    cache and TileLang's disk cache: a device call compiles them side by side instead of one after another as the
    tests reach them. A configuration that fails to build here fails again, with its message, in its test."""
    import torch

    from lazyops import _api

    if not torch.cuda.is_available() or _api.unavailable_reason("tilelang"):
        return
    import contextlib
    from concurrent.futures import ThreadPoolExecutor

    from lazyops.specs import kernel_names, spec

    builds = []
    served = _api.backend("tilelang").manifest()
    # LAZYOPS_GPU_AHEAD=k1,k2: only those kernels (a device call that tests a few, as `make gpu-tlfp8`)
    only = {name for name in os.environ.get("LAZYOPS_GPU_AHEAD", "").split(",") if name}
    for kernel in kernel_names():
        if kernel not in served or (only and kernel not in only):  # not ported to TileLang: its GPU tests skip it
            continue
        factory = _api.kernel_factory("tilelang", kernel)
        example = examples_of(spec(kernel)).benchmark(torch.bfloat16)
        builds.append((factory, example.args, dict(example.kwargs)))
        builds += [(factory, case.args, dict(case.kwargs)) for case in testing.class_cases(kernel, factory)]

    def build(job: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> None:
        factory, args, kwargs = job
        with contextlib.suppress(Exception):  # the test that builds it reports the failure
            factory(*args, **kwargs)

    with ThreadPoolExecutor(AHEAD_THREADS, thread_name_prefix="tilelang-ahead") as pool:
        list(pool.map(build, builds))


@pytest.fixture(autouse=True)
def _gpu_tests_find_tilelang_compiled(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("gpu") is not None:
        request.getfixturevalue("tilelang_compiled_ahead")
