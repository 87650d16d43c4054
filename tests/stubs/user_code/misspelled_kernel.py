"""A misspelled kernel name: both checkers must report it (at run time it is an AttributeError)."""

import torch

import lazyops

norm = lazyops.rmsnrom_tl(4096, torch.bfloat16)
