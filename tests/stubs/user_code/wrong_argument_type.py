"""Arguments of the wrong type, to a factory and to a kernel: both checkers must report each."""

import torch

import lazyops

norm = lazyops.rmsnorm_tl("4096", torch.bfloat16)
y = lazyops.softmax_tl(4096, torch.bfloat16)([1.0, 2.0])
