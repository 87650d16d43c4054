"""What every kernel test shares: the backends that can run here, how a test reaches a kernel, and how it judges one.

Each kernel is checked against the torch backend's ``*_reference`` function computed in float64 on the same
(freshly drawn) inputs, by the relative error ``‖out − ref‖ / ‖ref‖``. Tests get all of this through the
``kernels`` fixture, one :class:`Harness` per backend, so no test module imports this file.
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

import importlib  # noqa: E402
import importlib.util  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any, Callable  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

#: ‖out − ref‖ / ‖ref‖ allowed per dtype. For 16-bit types it is one unit in the last place at 1.0 (torch's
#: ``finfo.eps``): the kernels compute in float32 and round once at the store, which a GPU does to nearest (half
#: that error) and Triton's interpreter does for bfloat16 by truncation (under a full unit). For float32 what is
#: left is float32 arithmetic: softmax's ``exp(x - max)`` over a wide row of spread values errs by about
#: ``|x - max|`` units (2.8e-6 seen at n = 20000), matmul accumulates over k. TF32, a 16-bit intermediate or a
#: wrong row lands far above these; a single wrong element may not (hence the NaN poison and, for in-place
#: results, the element-by-element check).
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def runnable_backends() -> list[str]:
    """The backends whose kernels can run on this machine: the reference always, the others where they can."""
    backends = ["torch"]
    cuda = torch.cuda.is_available()
    if importlib.util.find_spec("triton") is not None:
        from lazyops._backends.triton import unavailable_reason

        if unavailable_reason() is None:
            backends.append("triton")
    if importlib.util.find_spec("tilelang") is not None and cuda:
        backends.append("tilelang")
    return backends


def factory(backend: str, name: str) -> Callable[..., Any]:
    """The kernel factory ``name`` (``"rmsnorm_tl"``) of ``backend``: the one place a test reaches a kernel."""
    module = importlib.import_module(f"lazyops._backends.{backend}.{name.removesuffix('_tl')}")
    return getattr(module, name)


@dataclass(frozen=True)
class Harness:
    """One backend as the kernel tests see it: where its tensors live and how many, how large, examples it gets."""

    backend: str
    device: str
    #: Kernels run in Triton's interpreter (about 0.3 s for a 256 x 1024 softmax): fewer, smaller examples.
    interpreted: bool

    def factory(self, name: str) -> Callable[..., Any]:
        return factory(self.backend, name)

    @staticmethod
    def reference_factory(name: str) -> Callable[..., Any]:
        """The torch backend's factory of the same name: the signature every backend must share."""
        return factory("torch", name)

    @property
    def max_elements(self) -> int:
        """The most elements one example's main input may hold (rows are cut to fit)."""
        return 100_000 if self.interpreted else 2_000_000

    def settings(self, interpreted_examples: int = 25, examples: int = 80) -> settings:
        return settings(max_examples=interpreted_examples if self.interpreted else examples, deadline=None)

    def rows(self, m: int, width: int) -> int:
        """``m`` cut so that ``m`` rows of ``width`` stay within :attr:`max_elements` (at least one row)."""
        return max(1, min(m, self.max_elements // max(width, 1)))

    def randn(self, generator: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator, dtype=torch.float32) * scale).to(dtype).to(self.device)

    def generator(self, seed: int) -> torch.Generator:
        """A CPU generator for one example's inputs: fresh data for every drawn seed, reproducible from it."""
        return torch.Generator().manual_seed(seed)

    @property
    def wrong_device(self) -> str:
        """A device this backend's kernels must refuse (meta stands in for "not the host" under the interpreter)."""
        return "meta" if self.device == "cpu" else "cpu"

    @staticmethod
    def strided(tensor: torch.Tensor) -> torch.Tensor:
        """``tensor``'s values and shape in a non-contiguous view (every other element of a wider buffer)."""
        wide = torch.zeros(*tensor.shape[:-1], 2 * tensor.shape[-1], dtype=tensor.dtype, device=tensor.device)
        wide[..., ::2] = tensor
        return wide[..., ::2]

    def poison(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        """Leave a NaN-filled block of the output's size free, so the kernel's output likely reuses it.

        The kernels allocate their own outputs, so a test cannot pre-fill them; but the CUDA caching allocator
        (and, often, malloc) hands a block just freed to the next allocation of its size. An element the kernel
        forgot to write then reads NaN, which :meth:`check` refuses, instead of a harmless zero.
        """
        block = torch.full(shape, float("nan"), dtype=dtype, device=self.device)
        del block

    def check(
        self, out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str = "output",
        tolerance: float | None = None,
    ) -> float:
        """``out`` is finite, has ``ref``'s shape and dtype, and is within the dtype's tolerance of ``ref``."""
        tolerance = TOLERANCE[dtype] if tolerance is None else tolerance
        assert out.dtype == dtype, f"{what}: dtype {out.dtype}, expected {dtype}"
        assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
        assert torch.isfinite(out).all(), f"{what}: {int((~torch.isfinite(out)).sum())} non-finite elements"
        error = relative_error(out, ref)
        assert error <= tolerance, f"{what}: relative error {error:.3g} > {tolerance:.0e} ({dtype})"
        return error

    def check_each(self, out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str) -> None:
        """Every element of an in-place result is within one unit in the last place of ``ref`` (plus float32
        rounding of the math, relative to the largest value): nothing stale, nothing written twice or astray."""
        if out.numel() == 0:
            assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)}, not {tuple(ref.shape)}"
            return
        ref = ref.to(torch.float64).cpu()
        got = out.to(torch.float64).cpu()
        bound = torch.finfo(dtype).eps * ref.abs() + 8 * torch.finfo(torch.float32).eps * ref.abs().max()
        bad = (got - ref).abs() > bound
        assert not bad.any(), (
            f"{what}: {int(bad.sum())} of {bad.numel()} elements off, first at {tuple(bad.nonzero()[0].tolist())}: "
            f"{got[bad][0].item()!r} vs {ref[bad][0].item()!r}"
        )


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``‖out − ref‖ / ‖ref‖`` in float64 (0 when both are empty or zero)."""
    out64 = out.to(torch.float64).cpu()
    ref64 = ref.to(torch.float64).cpu()
    norm = ref64.norm().item()
    diff = (out64 - ref64).norm().item()
    return diff / norm if norm else diff


def kernel_device(backend: str) -> tuple[str, bool]:
    """Where ``backend``'s kernels take their tensors here, and whether they run in Triton's interpreter."""
    if backend == "triton":
        from lazyops._backends.triton import interpreter_requested

        if interpreter_requested():
            return "cpu", True
        return "cuda", False
    if backend == "torch":
        return ("cuda" if torch.cuda.is_available() else "cpu"), False
    return "cuda", False


@pytest.fixture(params=runnable_backends(), scope="session")
def kernel_backend(request: pytest.FixtureRequest) -> str:
    """Each backend that can run on this machine, by name."""
    return request.param


@pytest.fixture(scope="session")
def kernels(kernel_backend: str) -> Harness:
    device, interpreted = kernel_device(kernel_backend)
    return Harness(backend=kernel_backend, device=device, interpreted=interpreted)
