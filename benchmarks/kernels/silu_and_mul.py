"""silu_and_mul_tl's peers beyond torch eager and torch.compile (which the timing engine derives from the spec)."""

from __future__ import annotations

from typing import Any

from lazyops._bench import Peer


def liger(config: Any) -> Peer:
    """liger-kernel's SiLU-and-mul. It takes the gate and the up projection as two contiguous tensors, so each
    input set is split once, outside the timing: the bytes a call moves are the kernel's (read 2n, write n)."""
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    n = config.n

    def split(x: Any) -> tuple[Any, Any]:
        return x[:, :n].contiguous(), x[:, n:].contiguous()

    return Peer(call=LigerSiLUMulFunction.apply, prepare=split)


PEERS = {"liger-kernel": liger}
