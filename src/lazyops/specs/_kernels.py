"""The kernels lazyops specifies: one name per spec module (``rmsnorm_tl`` is ``lazyops.specs.rmsnorm``).

The list is plain data, read without importing torch or any spec, so the tools know every kernel before any
backend implements one. A new kernel adds its name here with its spec module; ``tests/core/test_kernel_registry.py``
fails when a spec module, this list and the backends' manifests (``_backends/*/__init__.pyi``: the torch backend,
the last resort, implements every kernel) disagree.
"""

KERNELS = (
    "add_rmsnorm_fp8_tl",
    "add_rmsnorm_tl",
    "apply_penalties_tl",
    "fused_moe_tl",
    "gelu_and_mul_tl",
    "kv_cache_write_tl",
    "layernorm_tl",
    "matmul_fp8_tl",
    "matmul_tl",
    "moe_align_tl",
    "moe_route_tl",
    "paged_attention_tl",
    "quant_fp8_tl",
    "rmsnorm_fp8_tl",
    "rmsnorm_tl",
    "rope_tl",
    "sample_tl",
    "silu_and_mul_fp8_tl",
    "silu_and_mul_tl",
    "softmax_tl",
)
