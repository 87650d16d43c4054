"""The spec engine's promises that no kernel test sees: building a factory registers nothing with torch (operators
are registered on first use under ``torch.compile``), and a spec written for lazyops 0.1 fails with the way to move."""

from __future__ import annotations

import pytest

from fresh_interpreter import run_python


def test_building_and_calling_kernels_registers_no_operator(fake_backends):
    result = run_python(
        """
        import sys, torch, lazyops
        kernel = lazyops.rmsnorm_tl(64, torch.float32)
        kernel(torch.randn(2, 64), torch.randn(64))
        kernel(torch.randn(2, 64), torch.randn(64), out=torch.empty(2, 64))
        assert not hasattr(torch.ops, "lazyops_torch") or not hasattr(torch.ops.lazyops_torch, "rmsnorm"), "registered"
        assert "lazyops.specs._ops" not in sys.modules, "the operators' module is loaded without a compile"
        from lazyops.specs import _ops
        assert not _ops._registered, _ops._registered
        compiled = torch.compile(lambda x, w: kernel(x, w) * 2, fullgraph=True)
        compiled(torch.randn(2, 64), torch.randn(64))
        assert ("torch", "rmsnorm_tl") in _ops._registered
        print("ok")
        """,
        fake_backends.env(),
    )
    assert result.stdout.strip().endswith("ok"), result.stderr


def test_a_spec_written_for_lazyops_0_1_fails_with_the_way_to_move():
    from lazyops.specs import KernelSpec

    with pytest.raises(TypeError, match=r"written for lazyops 0\.1.*`params`.*`bind`.*Adding a kernel"):

        class OldSpec(KernelSpec):
            name = "old_tl"
            inputs = ("x",)
            row_inputs = ("x",)

            def configure(self, n, dtype):
                return None


def test_two_modules_making_one_kernel_for_one_backend_name_are_refused():
    """Their operators would be one: a compiled graph would run whichever was made first."""
    import torch

    from lazyops.specs.softmax import spec

    def made_in(module: str):
        def build(config):
            return lambda x: torch.softmax(x, -1)

        build.__module__ = module
        return build

    first, second = made_in("somepackage.fast.softmax"), made_in("somepackage.slow.softmax")
    spec.implementation(first)
    with pytest.raises(ValueError, match=r"already made by somepackage\.fast\.softmax.*backend="):
        spec.implementation(second)
    spec.implementation(second, backend="slow")  # the way out
