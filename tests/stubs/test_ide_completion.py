"""An IDE sees the kernels: jedi (the completion engine of several editors) reads the stub beside ``__init__.py``.

This runs against the package as this environment has it (the source tree's stub, through its symlink); the
installed wheel gets the same check in test_installed_wheel.py.
"""

from __future__ import annotations

import pytest

import lazyops

# In the test extra; a machine without it (the GPU machine's image) skips this file rather than stopping collection.
jedi = pytest.importorskip("jedi", reason="jedi is in lazyops' test extra: pip install 'lazyops[test]'")


def test_completing_a_prefix_offers_the_kernel_with_its_factory_signature_and_docstring():
    completions = jedi.Script("import lazyops\nlazyops.rmsnorm_t").complete()
    assert [c.name for c in completions] == ["rmsnorm_tl"]
    (signature,) = completions[0].get_signatures()
    assert [p.name for p in signature.params] == ["n", "dtype", "eps", "weight_dtype", "weight_offset"]
    assert signature.to_string() == (
        "rmsnorm_tl(n: int, dtype: torch.dtype | str, eps: float=1e-06, *, weight_dtype: torch.dtype | str | None=None, "
        "weight_offset: float=0.0) -> _RMSNormKernel"
    )
    assert "RMSNorm over the last dimension" in completions[0].docstring()


def test_every_kernel_and_the_public_api_are_offered():
    names = {c.name for c in jedi.Script("import lazyops\nlazyops.").complete()}
    assert set(lazyops.kernels()) <= names
    assert set(lazyops.__all__) <= names


def test_the_kernel_call_shows_its_parameters():
    source = "import lazyops\nkernel = lazyops.rope_tl(128, 'bfloat16')\nkernel("
    (signature,) = jedi.Script(source).get_signatures(line=3, column=7)
    assert [p.name for p in signature.params] == ["positions", "query", "key", "cos_sin_cache"]
