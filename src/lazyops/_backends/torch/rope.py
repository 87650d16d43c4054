"""Rotary embedding in plain PyTorch (the spec: ``lazyops.specs.rope``).

Written over views: the rotary features of every head, seen as pairs ``(x1, x2)`` (the two halves of the rotary
features for neox, neighbours otherwise), are rotated in float32 (one rounding at the store, as every backend
computes) and copied back into the same views. Nothing else of a head is touched or cloned. The check that
``query`` and ``key`` do not overlap has run before the launch, so rotating one cannot alter the other's inputs.

On the CPU, four ops a tensor: ``rotated = x * cos`` over both halves at once, then ``x2 * sin`` subtracted from
the first half and ``x1 * sin`` added to the second, then the store; mixed-dtype ops copy their inputs first
there, so a block of tokens is upcast once, and the blocks are small enough for the float32 passes to stay in
cache (see ``CPU_BLOCK_ELEMENTS``). On a GPU (this backend as the last fallback), three: each pair becomes a
complex64 number in a float32 copy, one multiplication by ``cos + i sin`` turns it, and the store rounds once
(see ``GPU_ROTATION``).

Positions are range-checked on the CPU (``index_select`` refuses an index outside the cache, before anything is
written); on a GPU, out-of-range tokens are left unrotated without reading the positions on the host, as the GPU
backends do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lazyops.specs.rope import RopeConfig, check_positions_in_cache, spec

#: Elements of rotary features a CPU block holds: 2 MiB of float32, so that a block's upcast copy and its rotation
#: stay in cache between the four passes, while each op is still large enough to split over torch's threads.
#: Measured on this project's 2-core machine, quiet (2026-11-30, bf16 / float32 against torch's eager rotation,
#: M = 128 and 1024): 2**15 (one thread an op, chosen earlier under load) 0.56 / 0.66 and 0.83 / 1.17; 2**17
#: 1.27 / 1.61 and 1.69 / 2.67; 2**19 1.37 / 2.16 and 2.16 / 3.50; no blocks 1.35 / 1.04 and 2.56 / 1.70.
CPU_BLOCK_ELEMENTS = 1 << 19
#: How a GPU rotates 16-bit pairs (this backend as the last fallback there), each measured against torch's eager
#: rotation by ``benchmarks/torch_backend.py --device cuda --rope-gpu-rotation MODE`` in one H200 session
#: (``benchmarks/results/torch_backend_cuda*.md``):
#:
#: - ``"float32"``: the pairs enter the ops as they are and type promotion does float32 math against float32
#:   ``cos``/``sin``, rounded once at the store; mixed bf16/float32 ops take PyTorch's per-element cast path.
#: - ``"upcast"``: the pairs upcast to float32 once, first, as the CPU does: one dtype per op, more bytes.
#: - ``"input"``: ``cos``/``sin`` rounded to the pairs' dtype and the ops in that dtype, as torch's own eager
#:   rotation (and vLLM's ``forward_native``) computes: each of the three ops rounds (float32 inside).
#: - ``"complex"``: each pair a complex64 number, turned by one multiplication with ``cos + i sin``: three ops a
#:   tensor (a float32 copy with the pair's two features side by side, the product, the store), each in one
#:   dtype, float32 math rounded once at the store (:func:`rotate_complex`).
#:
#: Measured (H200, 2026-12-01, 32 + 8 heads of 128, bf16, M = 1 / 1024 / 32768): float32 1.00 / 1.02 / 0.74,
#: upcast 0.84 / 0.81 / 0.80, input 0.93 / 0.90 / 1.17. "input" is the fastest of those three at 32768, and its
#: relative error (2.4e-3) is below the eager rotation's (2.7e-3), but it fails the conformance kit: rope writes
#: in place, and the kit compares in-place results element by element, where three roundings miss (1.1 M of
#: 16.8 M elements at M = 4096, ``gpu_conformance_torch_rope_input.md``). Then, in one later session
#: (``torch_backend_cuda_rope_{float32,complex}.md``, bf16 / float16 / float32): float32 at 32768 0.74 / 0.76 /
#: 1.45, complex 1.06 / 1.05 / 1.54, and at M = 1 and 1024 complex 1.08–1.12 in 16-bit, 0.90–0.91 in float32
#: (float32 0.89–0.95 there, both host-bound); complex passes the kit, element by element included
#: (``gpu_conformance_torch_rope_complex.md``): its math is the float32 rotation's, one rounding at the store.
GPU_ROTATION = "complex"
GPU_ROTATIONS = ("float32", "upcast", "input", "complex")


def rotate(pairs: torch.Tensor, cos_pairs: torch.Tensor, sin: torch.Tensor, pair_dim: int) -> None:
    """Rotate ``pairs`` in place: ``x1, x2 = pairs.unbind(pair_dim)``, ``sin`` broadcast against them and
    ``cos_pairs`` (``cos.unsqueeze(pair_dim)``, made once for query and key) against ``pairs``.

    ``x1 * cos - x2 * sin`` and ``x2 * cos + x1 * sin`` in the dtype of ``cos`` and ``sin`` (float32, stored once;
    the pairs' own with ``GPU_ROTATION = "input"``).
    """
    features = pairs.float() if pairs.is_cpu or GPU_ROTATION == "upcast" else pairs  # a copy for 16-bit types
    x1, x2 = features.unbind(pair_dim)
    rotated = torch.mul(features, cos_pairs)  # a new tensor of ``cos``'s dtype
    rotated1, rotated2 = rotated.unbind(pair_dim)
    rotated1.addcmul_(x2, sin, value=-1.0)
    rotated2.addcmul_(x1, sin)
    pairs.copy_(rotated)


def rotate_complex(pairs: torch.Tensor, turn: torch.Tensor, pair_dim: int) -> None:
    """Rotate ``pairs`` in place as complex numbers: ``x1 + i x2`` times ``turn`` (``cos + i sin``, complex64,
    broadcast against the pairs without their pair dimension), in float32, rounded once at the store."""
    neighbours = pairs.movedim(pair_dim, -1)  # each pair's two features side by side: a view
    # a fresh float32 copy, pairs as its last dimension (``to()`` would keep a float32 view as it is)
    dense = torch.empty_like(neighbours, dtype=torch.float32, memory_format=torch.contiguous_format).copy_(neighbours)
    neighbours.copy_(torch.view_as_real(torch.view_as_complex(dense) * turn))


@spec.implementation(strided_rows=True)
def rope_tl(config: RopeConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    head_dim, is_neox, label = config.head_dim, config.is_neox, config.label
    # neox: [..., 2, r/2] (the two halves); GPT-J: [..., r/2, 2] (interleaved neighbours)
    pair_dim = -2 if is_neox else -1

    def as_pairs(x: torch.Tensor, rotary_dim: int) -> torch.Tensor:
        heads = x.view(x.shape[0], x.shape[1] // head_dim, head_dim)
        if rotary_dim != head_dim:  # (a slice costs an op's dispatch: skipped for the usual full rotation)
            heads = heads[..., :rotary_dim]
        half = rotary_dim // 2
        pairs: torch.Tensor = heads.unflatten(-1, (2, half) if is_neox else (half, 2))
        return pairs

    def rope(
        positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows, rotary_dim = cos_sin_cache.shape
        half = rotary_dim // 2
        if positions.is_cpu:
            try:
                cos_sin = cos_sin_cache.index_select(0, positions)
            except IndexError:
                # On the host the values are at hand: an index outside the cache is refused, not read.
                check_positions_in_cache(label, positions, rows)
                raise
            # float32 (itself for a float32 cache), [tokens, 1, rotary_dim] cut in halves: each a view
            cos, sin = cos_sin.float().unsqueeze(1).chunk(2, -1)
        else:
            # On a GPU, reading them would synchronise every call and break CUDA-graph capture. As the GPU
            # backends do, a token whose position lies outside the cache is left as it is: it is rotated by
            # cos = 1, sin = 0, which in float32 reproduces every feature exactly.
            clamped = positions.clamp(0, rows - 1)
            # cos and sin in the dtype the rotation computes in; 1 and 0 are exact in every one of them
            rotation_dtype = query.dtype if GPU_ROTATION == "input" else torch.float32
            cos_sin = cos_sin_cache.index_select(0, clamped).to(rotation_dtype)
            inside = (clamped == positions)[:, None, None]
            cos = torch.where(inside, cos_sin[:, None, :half], 1.0)
            sin = cos_sin[:, None, half:] * inside
            if GPU_ROTATION == "complex":
                turn = torch.complex(cos, sin)
                for x in (query, key):
                    rotate_complex(as_pairs(x, rotary_dim), turn, pair_dim)
                return query, key
        cos_pairs = cos.unsqueeze(pair_dim)
        for x in (query, key):
            pairs = as_pairs(x, rotary_dim)
            if pairs.is_cpu:
                tokens = pairs.shape[0]
                block = max(1, CPU_BLOCK_ELEMENTS // (pairs.shape[1] * rotary_dim))
                if tokens > block:
                    for start in range(0, tokens, block):
                        end = start + block
                        rotate(pairs[start:end], cos_pairs[start:end], sin[start:end], pair_dim)
                    continue
            rotate(pairs, cos_pairs, sin, pair_dim)
        return query, key

    return rope
