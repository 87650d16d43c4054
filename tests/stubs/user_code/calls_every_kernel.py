"""A user's file that calls every kernel factory, and every kernel, as documented: both checkers must accept it.

It also runs (on the CPU, from the torch backend), so what it claims type-checks is what works.
"""

import torch

import lazyops

m, n, k = 3, 64, 32
x = torch.randn(m, n)
weight = torch.ones(n)
residual = torch.zeros(m, n)

y: torch.Tensor = lazyops.softmax_tl(n, torch.float32)(x)
y = lazyops.rmsnorm_tl(n, "float32", eps=1e-5)(x, weight)
y = lazyops.add_rmsnorm_tl(n, dtype=torch.float32)(x, residual, weight)
y = lazyops.silu_and_mul_tl(n // 2, torch.float32)(x)
y = lazyops.matmul_tl(k, n, "fp32")(x, torch.randn(n, k))

head_dim = 16
positions = torch.arange(m)
query, key = torch.randn(m, 4 * head_dim), torch.randn(m, 2 * head_dim)
cos_sin_cache = torch.randn(8, head_dim)
rope = lazyops.rope_tl(head_dim, torch.float32, is_neox=False)
rotated_query, rotated_key = rope(positions, query, key, cos_sin_cache)
both: tuple[torch.Tensor, torch.Tensor] = (rotated_query, rotated_key)

kernels: tuple[str, ...] = lazyops.kernels()
backends: tuple[str, ...] = lazyops.backends()
where: str = lazyops.which("rmsnorm_tl").backend
lazyops.configure(backend="torch", fallback=None, strict=False)
lazyops.configure(backend=["torch"], fallback=[])
version: str = lazyops.__version__

try:
    factory = lazyops.rmsnorm_tl
except lazyops.KernelUnavailableError as error:
    missing: str = error.kernel
except (lazyops.ConfigError, lazyops.BackendError, lazyops.KernelInputError, lazyops.LazyopsError):
    pass

print("ok", sorted(kernels))
