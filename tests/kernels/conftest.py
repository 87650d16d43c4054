"""What every kernel test shares: how a test reaches a kernel and how it judges one.

Tests take the ``kernels`` fixture, one :class:`Harness` per backend: it stands on the pytest plugin's
``lazyops_backend`` fixture, which runs each test once per backend that can run here, with that backend selected
alone and strict. Kernels are reached through the public namespace (``lazyops.rmsnorm_tl``), so a test exercises
what users get and can never silently run another backend's kernel. The judging (tolerances, relative error,
poisoning, element-wise checks of in-place results) is the conformance kit's, ``lazyops.testing``: the built-ins
are checked exactly as a third-party backend checks itself.
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
from dataclasses import dataclass  # noqa: E402
from typing import Any, Callable  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

import lazyops  # noqa: E402
from lazyops import testing  # noqa: E402



@dataclass(frozen=True)
class Harness:
    """One backend as the kernel tests see it: where its tensors live and how many, how large, examples it gets."""

    backend: str
    device: str
    #: Kernels run in Triton's interpreter (about 0.3 s for a 256 x 1024 softmax): fewer, smaller examples.
    interpreted: bool

    def factory(self, name: str) -> Callable[..., Any]:
        """``lazyops.<name>``, resolved with this backend selected alone and strict (the fixture's doing)."""
        factory = getattr(lazyops, name)
        assert lazyops.which(name).backend == self.backend, f"{name} resolved from {lazyops.which(name).backend}"
        return factory

    @staticmethod
    def reference_factory(name: str) -> Callable[..., Any]:
        """The torch backend's factory of the same name: the signature every backend must share (the test oracle,
        read from the reference module directly, not through the namespace)."""
        module = importlib.import_module(f"lazyops._backends.torch.{name.removesuffix('_tl')}")
        return getattr(module, name)

    @property
    def max_elements(self) -> int:
        """The most elements one example's main input may hold (rows are cut to fit)."""
        return 100_000 if self.interpreted else 2_000_000

    def settings(self, interpreted_examples: int = 25, examples: int = 80) -> settings:
        return settings(max_examples=interpreted_examples if self.interpreted else examples, deadline=None)

    def rows(self, m: int, width: int) -> int:
        """``m`` cut so that ``m`` rows of ``width`` stay within :attr:`max_elements` (at least one row)."""
        return max(1, testing.rows(m, width, self.max_elements))

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
        testing.poison(shape, dtype, self.device)

    @staticmethod
    def check(
        out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str = "output", tolerance: float | None = None
    ) -> float:
        return testing.check_close(out, ref, dtype, what, tolerance)

    @staticmethod
    def check_each(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str) -> None:
        testing.check_each(out, ref, dtype, what)


@pytest.fixture
def kernels(lazyops_backend: str) -> Harness:
    device = testing.default_device(lazyops_backend)
    return Harness(backend=lazyops_backend, device=device, interpreted=lazyops_backend == "triton" and device == "cpu")
