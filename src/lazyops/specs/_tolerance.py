"""How close to the float64 reference a correct kernel's output comes, per dtype: the contract's yardstick, which
the conformance kit judges by (``lazyops.testing._compare``) and a spec's ``tolerance()`` widens where a correct
kernel cannot reach it (a GEMM's grows with ``k``)."""

from __future__ import annotations

import torch

#: ‖out − ref‖ / ‖ref‖ allowed per dtype. For 16-bit types it is one unit in the last place at 1.0 (torch's
#: ``finfo.eps``): the kernels compute in float32 and round once at the store, which a GPU does to nearest (half
#: that error) and Triton's interpreter does for bfloat16 by truncation (under a full unit). For float32 what is
#: left is float32 arithmetic: softmax's ``exp(x - max)`` over a wide row of spread values errs by about
#: ``|x - max|`` units (2.8e-6 seen at n = 20000), matmul accumulates over k. Any real slip (TF32, a 16-bit
#: intermediate, a wrong element) is orders of magnitude above these.
#:
#: ``float8_e4m3fn`` (the fp8 norms' output) has 3 mantissa bits: one round-to-nearest errs by at most half a unit,
#: ``2**-4`` of the value's power of two, which relative to the value is largest just below the first midpoint,
#: ``2**-4 / (1 + 2**-4) = 1/17 ≈ 0.0588``. Every element at that worst point bounds the normwise error too, so
#: 0.06 is what a correct kernel can reach (it typically sees 0.026); a wrong scale, a dropped weight, a missed
#: clamp or a garbled element is far above it. Near zero see ``lazyops.testing._compare.absolute_tolerance``.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float8_e4m3fn: 0.06}
