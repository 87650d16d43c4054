"""Greedy generation for a small Llama- or Qwen3-MoE-shaped model, entirely on lazyops kernels, with a paged KV cache.

    python examples/generate.py          # random weights; each decode step replayed from a CUDA graph on a GPU
    python examples/generate.py --hf     # a tiny random Hugging Face LlamaForCausalLM: its tokens and ours
    python examples/generate.py --model qwen3-moe --hf   # a tiny random Qwen3MoeForCausalLM: its tokens and ours
    LAZYOPS_BACKEND=triton python examples/generate.py --hf --dtype float32    # on a GPU, in float32 as HF's
    python examples/generate.py --bench  # on a GPU: a decode step of 4 Llama-3-8B layers against HF (make gpu-engine)
    python examples/generate.py --fp8 block   # fp8 weights (128x128 blocks; or channel): its tokens and float32's

Prefill packs every prompt into one call; a decode step is one token per sequence, replayed from a CUDA graph on a
GPU (its index tensors are static buffers refilled before each replay: the kernels read them on the device). On a
CPU the same code runs through the torch backend. Kernels: ``matmul_tl`` (every projection, the LM head),
``rmsnorm_tl``, ``add_rmsnorm_tl``, ``rope_tl``, ``silu_and_mul_tl``, ``kv_cache_write_tl``, ``paged_attention_tl``,
``sample_tl``. ``--model qwen3-moe``: Qwen3-MoE's layers instead (issue 36): each query and key head RMS-normed
(``rmsnorm_tl`` over the head dim) before rope, and a sparse MoE block for the MLP: the router's GEMM
(``matmul_tl``), ``moe_route_tl`` (softmax, top-k, renormalised where the model says ``norm_topk_prob``) and
``fused_moe_tl`` on Hugging Face's own expert layout (``gate_up_proj[E, 2I, H]``, ``down_proj[E, H, I]``); every
layer is sparse (``decoder_sparse_step`` 1, no ``mlp_only_layers``).

``--fp8 block|channel`` serves an fp8 checkpoint: every projection's weight (the LM head's too) quantised once to
float8 e4m3 (:func:`quantise_weight`: 128x128 blocks or one scale an output channel), the activations quantised on
the fly by the producers that feed each GEMM (``rmsnorm_fp8_tl``, ``add_rmsnorm_fp8_tl`` and
``silu_and_mul_fp8_tl`` with dynamic 1x128-group or per-token scales, ``quant_fp8_tl`` for attention's output), every
GEMM through ``matmul_fp8_tl`` (the dense model only). It prints its tokens beside those of the float32 model on
the dequantised weights.
"""

from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import lazyops


@dataclass(frozen=True)
class Shape:
    """The random run's model: tiny, with heads of 64 (a size every GPU backend's attention tiles take)."""

    vocab: int = 128
    hidden: int = 256
    intermediate: int = 512
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    eps: float = 1e-6
    theta: float = 10000.0
    #: Qwen3-MoE's: ``experts`` of ``intermediate`` each, ``top_k`` a token (0: a dense Llama MLP); the query and
    #: key heads RMS-normed; ``head_size`` where it is not ``hidden // heads`` (0)
    experts: int = 0
    top_k: int = 0
    renormalize: bool = True
    qk_norm: bool = False
    head_size: int = 0

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads


#: ``--model qwen3-moe``'s random model: Qwen3-30B-A3B's layer shape in small (8 of 32 experts, 4 heads of 64).
QWEN3_MOE = Shape(intermediate=128, experts=32, top_k=8, renormalize=True, qk_norm=True)


def random_weights(s: Shape, seed: int = 0) -> dict[str, torch.Tensor]:
    """Weights named as Hugging Face's Llama (or Qwen3-MoE) names them (projections ``[out, in]``; the experts'
    stacks ``mlp.experts.gate_up_proj[E, 2I, H]`` and ``mlp.experts.down_proj[E, H, I]``)."""
    g = torch.Generator().manual_seed(seed)
    q, kv, d, f = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.hidden, s.intermediate
    layer = {"self_attn.q_proj": (q, d), "self_attn.k_proj": (kv, d), "self_attn.v_proj": (kv, d)}
    layer |= {"self_attn.o_proj": (d, q)}
    if s.experts:
        layer |= {"mlp.gate": (s.experts, d), "mlp.experts.gate_up_proj": (s.experts, 2 * f, d)}
        layer |= {"mlp.experts.down_proj": (s.experts, d, f)}
    else:
        layer |= {"mlp.gate_proj": (f, d), "mlp.up_proj": (f, d), "mlp.down_proj": (d, f)}
    layer |= {"input_layernorm": (d,), "post_attention_layernorm": (d,)}
    if s.qk_norm:
        layer |= {"self_attn.q_norm": (s.head_dim,), "self_attn.k_norm": (s.head_dim,)}
    sizes = {"embed_tokens": (s.vocab, d), "norm": (d,), "lm_head": (s.vocab, d)}
    sizes |= {f"layers.{i}.{name}": size for i in range(s.layers) for name, size in layer.items()}
    scale = {1: 0.1, 2: 0.02, 3: 0.02}  # norms around 1, projections around 0

    def name(module: str) -> str:  # the experts' stacks are parameters of their own, not a module's weight
        return module if ".experts." in module else f"{module}.weight"

    return {name(n): (len(z) == 1) + scale[len(z)] * torch.randn(z, generator=g) for n, z in sizes.items()}


def from_hugging_face(model: torch.nn.Module) -> tuple[Shape, dict[str, torch.Tensor]]:
    """A ``LlamaForCausalLM``'s (or ``Qwen3MoeForCausalLM``'s) shape and weights, under the names
    :func:`random_weights` uses."""
    c = model.config
    theta = getattr(c, "rope_theta", None) or (getattr(c, "rope_parameters", None) or {}).get("rope_theta", 1e4)
    heads = (c.num_attention_heads, c.num_key_value_heads)
    experts = getattr(c, "num_experts", 0) or 0
    if experts and (getattr(c, "mlp_only_layers", None) or getattr(c, "decoder_sparse_step", 1) != 1):
        raise ValueError("the example engine's MoE layers are all sparse: no mlp_only_layers, decoder_sparse_step 1")
    moe = {"experts": experts, "top_k": c.num_experts_per_tok, "renormalize": c.norm_topk_prob} if experts else {}
    size = c.moe_intermediate_size if experts else c.intermediate_size
    shape = Shape(c.vocab_size, c.hidden_size, size, c.num_hidden_layers, *heads, c.rms_norm_eps, theta, **moe,
                  qk_norm="qwen3" in c.model_type, head_size=getattr(c, "head_dim", None) or 0)  # fmt: skip
    weights = {k.removeprefix("model."): v.detach() for k, v in model.state_dict().items()}
    weights.setdefault("lm_head.weight", weights["embed_tokens.weight"])  # tied embeddings
    return shape, weights


#: ``--fp8``: the weights' scales -> (``matmul_fp8_tl``'s scales, the activations' dynamic scales); the block side
FP8_SCALES, FP8_BLOCK = {"block": ("block", "group"), "channel": ("rowwise", "token")}, 128


def quantise_weight(w: torch.Tensor, fp8: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A checkpoint's weight ``w[n, k]`` in float8 e4m3 and its float32 scales, as fp8 checkpoints store them:
    ``"channel"``: ``[n, 1]``, one an output channel; ``"block"``: ``[ceil(n/128), ceil(k/128)]`` (DeepSeek-V3's).
    Each scale is its block's absolute maximum over 448, floored as ``quant_fp8_tl`` floors a zero row's."""
    n, k = w.shape
    side = (1, k) if fp8 == "channel" else (FP8_BLOCK, FP8_BLOCK)
    rows, cols = -(-n // side[0]), -(-k // side[1])
    padded = torch.nn.functional.pad(w.float(), (0, cols * side[1] - k, 0, rows * side[0] - n))
    amax = padded.view(rows, side[0], cols, side[1]).abs().amax(dim=(1, 3))
    scale = amax.clamp(min=1e-10) / 448.0
    values = (w.float() / spread(scale, fp8, n, k)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return values, scale


def spread(scale: torch.Tensor, fp8: str, n: int, k: int) -> torch.Tensor:
    """``quantise_weight``'s scales broadcast over the weight's elements (``[n, 1]`` or ``[n, k]``)."""
    if fp8 == "channel":
        return scale
    return scale.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[:n, :k]


def dequantised_weights(weights: dict[str, torch.Tensor], fp8: str) -> dict[str, torch.Tensor]:
    """The float32 model an fp8 engine serves: each projection's weight (every 2-D weight but the embedding)
    quantised by :func:`quantise_weight` and multiplied back by its scales."""
    out = {name: w.float() for name, w in weights.items()}
    for name, w in weights.items():
        if w.dim() == 2 and name != "embed_tokens.weight":
            values, scale = quantise_weight(w, fp8)
            out[name] = values.float() * spread(scale, fp8, *w.shape)
    return out


class Engine:
    """The model's kernels, its weights laid out as the kernels take them, and a paged KV cache per layer;
    ``fp8="block"`` or ``"channel"``: its projections' weights quantised once, its GEMMs ``matmul_fp8_tl``'s."""

    def __init__(self, s: Shape, weights: dict[str, torch.Tensor], dtype: torch.dtype, device: str,
                 block_size: int = 16, num_blocks: int = 64, max_len: int = 1024,
                 fp8: str | None = None) -> None:  # fmt: skip
        if fp8 and s.experts:
            raise ValueError(
                f"fp8={fp8!r} serves the dense Llama model only: fused_moe_tl takes no fp8 experts yet; "
                "run the MoE model without --fp8"
            )
        self.device, self.block_size, self.free, self.shape = device, block_size, list(range(num_blocks)), s
        q, kv, d, f = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.hidden, s.intermediate
        self.split = (q, q + kv)  # the packed qkv's query | key | value columns
        w = {k: v.to(device, dtype) for k, v in weights.items()}

        def packed(*names: str) -> Any:  # [in, out], as matmul_tl takes its weight; fp8: ([n, k], its scales)
            if fp8:
                return pack_fp8([quantise_weight(weights[f"{n}.weight"], fp8) for n in names], fp8, device)
            return torch.cat([w[f"{n}.weight"] for n in names]).t().contiguous()

        self.layers = []
        for i in range(s.layers):
            a, m = f"layers.{i}.self_attn", f"layers.{i}.mlp"
            cache = torch.zeros(2, num_blocks, block_size, s.kv_heads, s.head_dim, dtype=dtype, device=device)
            self.layers.append({
                "qkv": packed(f"{a}.q_proj", f"{a}.k_proj", f"{a}.v_proj"), "o": packed(f"{a}.o_proj"),
                "in_norm": w[f"layers.{i}.input_layernorm.weight"], "cache": cache,
                "post_norm": w[f"layers.{i}.post_attention_layernorm.weight"],
            })  # fmt: skip
            if s.experts:  # the router [in, out] as matmul_tl takes it; the experts' stacks as Hugging Face holds them
                self.layers[-1] |= {"router": packed(f"{m}.gate"), "w13": w[f"{m}.experts.gate_up_proj"]}
                self.layers[-1]["w2"] = w[f"{m}.experts.down_proj"]
            else:
                self.layers[-1] |= {
                    "gate_up": packed(f"{m}.gate_proj", f"{m}.up_proj"),
                    "down": packed(f"{m}.down_proj"),
                }
            if s.qk_norm:
                self.layers[-1] |= {"q_norm": w[f"{a}.q_norm.weight"], "k_norm": w[f"{a}.k_norm.weight"]}
        self.embed, self.final_norm, self.lm_head = w["embed_tokens.weight"], w["norm.weight"], packed("lm_head")
        sizes = {"qkv": (q + 2 * kv, d), "o": (d, q), "lm_head": (s.vocab, d)}
        sizes |= {"router": (s.experts, d)} if s.experts else {"gate_up": (2 * f, d), "down": (d, f)}
        self.mm = {name: lazyops.matmul_tl(n, k, dtype) for name, (n, k) in sizes.items()}
        self.norm, self.add_norm = lazyops.rmsnorm_tl(d, dtype, s.eps), lazyops.add_rmsnorm_tl(d, dtype, s.eps)
        self.rope = lazyops.rope_tl(s.head_dim, dtype, is_neox=True)
        self.write = lazyops.kv_cache_write_tl(s.kv_heads, s.head_dim, dtype, block_size=block_size)
        self.attend = lazyops.paged_attention_tl(*(s.heads, s.kv_heads, s.head_dim, dtype), block_size=block_size)
        self.sample = lazyops.sample_tl(s.vocab, dtype)  # reads no value on the host: fine inside a CUDA graph
        if s.experts:  # the MLP's kernels: the router and the experts, or SiLU-and-mul
            route = lazyops.moe_route_tl(s.experts, s.top_k, dtype, scoring="softmax", renormalize=s.renormalize)
            self.mlp = [route, lazyops.fused_moe_tl(d, f, s.experts, s.top_k, dtype, activation="silu")]
        else:
            self.silu = lazyops.silu_and_mul_tl(f, dtype)
            self.mlp = [self.silu]
        built = [*self.mm.values(), self.norm, self.add_norm, *self.mlp]
        if fp8:  # the dense model's producers and GEMMs replaced by their fp8 forms
            built = self.take_fp8(fp8, s, sizes, dtype)
        self.head_norm = lazyops.rmsnorm_tl(s.head_dim, dtype, s.eps) if s.qk_norm else None
        # Hugging Face's default rope: frequencies theta**(-2i/D), halves rotated (rotate_half: neox style)
        inverse = s.theta ** -(torch.arange(0, s.head_dim, 2, dtype=torch.float64) / s.head_dim)
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inverse
        self.cos_sin = torch.cat([angles.cos(), angles.sin()], -1).float().to(device)
        # A decode step is replayed from a CUDA graph only where no kernel of it comes from the torch backend, whose
        # kernels read index values (positions, slots, lengths) on the host to check them, which a capture cannot.
        kernels = [*built, self.rope, self.write, self.attend]
        kernels += [self.head_norm] if self.head_norm is not None else []
        self.host_checked = sorted({k.__name__ for k in kernels if getattr(k, "lazyops_backend", None) == "torch"})
        self.graphs = device == "cuda" and not self.host_checked

    def take_fp8(self, fp8: str, s: Shape, sizes: dict[str, tuple[int, int]], dtype: torch.dtype) -> list[Any]:
        """The fp8 kernels in the places of the 16-bit ones, and the lazyops kernels they call: each producer
        (norm, add-norm, SiLU-and-mul, attention's output) returns ``(float8 values, their scales)``, each GEMM
        takes that pair and the weight's."""
        gemm, act = FP8_SCALES[fp8]
        q, d, f = s.heads * s.head_dim, s.hidden, s.intermediate
        norm = lazyops.rmsnorm_fp8_tl(d, dtype, s.eps, scales=act)
        add_norm = lazyops.add_rmsnorm_fp8_tl(d, dtype, s.eps, scales=act)
        silu, quant = lazyops.silu_and_mul_fp8_tl(f, dtype, act), lazyops.quant_fp8_tl(q, dtype, act)
        mm = {name: lazyops.matmul_fp8_tl(n, k, dtype, gemm) for name, (n, k) in sizes.items()}

        def producer(kernel: Any, width: int) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
            groups = 1 if act == "token" else width // FP8_BLOCK

            def produce(x: torch.Tensor, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                scale = torch.empty(x.shape[0], groups, dtype=torch.float32, device=x.device)  # written by kernel
                return kernel(x, *args, scale), scale

            return produce

        def matmul(kernel: Any, quantise: Callable[..., Any] | None = None) -> Callable[..., torch.Tensor]:
            def product(x: Any, w: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
                a, scale_a = quantise(x) if quantise is not None else x
                return kernel(a, w[0], scale_a, w[1])

            return product

        self.norm, self.add_norm, self.silu = producer(norm, d), producer(add_norm, d), producer(silu, f)
        self.mm = {name: matmul(kernel, producer(quant, q) if name == "o" else None) for name, kernel in mm.items()}
        return [*mm.values(), norm, add_norm, silu, quant]

    def round_activations(self, fp8: str) -> Engine:
        """This engine (float32, on :func:`dequantised_weights`) made the float32 twin of an ``fp8`` one: each GEMM's
        input rounded where the fp8 engine quantises it (by ``quant_fp8_tl``, after the norm, the add-norm and
        SiLU-and-mul, and on attention's output) and multiplied back by its scales, so that both multiply the same
        values, the twin in float32 by ``matmul_tl`` on the dequantised weights."""
        act = FP8_SCALES[fp8][1]
        quantiser = functools.cache(lambda width, dtype: lazyops.quant_fp8_tl(width, dtype, act))  # built once

        def rounded(kernel: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
            def run(*args: Any) -> torch.Tensor:
                y = kernel(*args)
                rows, width = y.shape
                groups = 1 if act == "token" else width // FP8_BLOCK
                scale = torch.empty(rows, groups, dtype=torch.float32, device=y.device)
                values = quantiser(width, y.dtype)(y, scale).float()
                return (values.view(rows, groups, -1) * scale[..., None]).view(rows, width).to(y.dtype)

            return run

        self.norm, self.add_norm, self.silu = rounded(self.norm), rounded(self.add_norm), rounded(self.silu)
        project, keep = self.mm["o"], rounded(lambda x: x)
        self.mm["o"] = lambda x, w: project(keep(x), w)
        return self

    def forward(self, tokens, positions, slots, table, lengths, starts, last) -> torch.Tensor:
        """Logits of rows ``last`` for a packed batch of tokens (their index tensors all on the device)."""
        residual = self.embed[tokens]
        h = self.norm(residual, self.layers[0]["in_norm"])
        for i, layer in enumerate(self.layers):
            qkv = self.mm["qkv"](h, layer["qkv"])
            query, key, value = qkv[:, : self.split[0]], qkv[:, self.split[0] : self.split[1]], qkv[:, self.split[1] :]
            if self.head_norm is not None:  # Qwen3's: each query and key head RMS-normed (qkv's heads are no rows
                # of one stride: the norm reads a copy of them)
                query, key = (
                    self.head_norm(x.reshape(-1, self.shape.head_dim), layer[norm]).view(x.shape)
                    for x, norm in ((query, "q_norm"), (key, "k_norm"))
                )
            self.rope(positions, query, key, self.cos_sin)
            key_cache, value_cache = layer["cache"]
            self.write(key, value, key_cache, value_cache, slots)
            attended = self.attend(query, key_cache, value_cache, table, lengths, starts)
            h = self.add_norm(self.mm["o"](attended, layer["o"]), residual, layer["post_norm"])
            mlp = self.moe(h, layer) if self.shape.experts else self.dense(h, layer)
            h = self.add_norm(
                mlp, residual, self.layers[i + 1]["in_norm"] if i + 1 < len(self.layers) else self.final_norm
            )
        return self.mm["lm_head"](tuple(t[last] for t in h) if isinstance(h, tuple) else h[last], self.lm_head)

    def dense(self, h: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        """Llama's MLP: gate and up in one GEMM, SiLU-and-mul, down."""
        return self.mm["down"](self.silu(self.mm["gate_up"](h, layer["gate_up"])), layer["down"])

    def moe(self, h: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        """Qwen3-MoE's sparse block: the router's logits, each token's ``k`` experts and weights, the experts."""
        route, experts = self.mlp
        weights = torch.empty(h.shape[0], self.shape.top_k, dtype=torch.float32, device=h.device)
        ids = torch.empty(h.shape[0], self.shape.top_k, dtype=torch.int32, device=h.device)
        route(self.mm["router"](h, layer["router"]), weights, ids)
        return experts(h, layer["w13"], layer["w2"], weights, ids)

    def generate(self, prompts: list[list[int]], new_tokens: int, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0) -> list[list[int]]:  # fmt: skip
        """Continuations (greedy at temperature 0) drawn by ``sample_tl``, request ``b`` seeded ``seed + b``: one
        packed prefill, then decode steps (each a CUDA graph's replay on a GPU)."""
        logits, step, advance = self.prefill(prompts, new_tokens)
        b, f32 = len(prompts), torch.float32
        params = [torch.full((b,), temperature, dtype=f32), torch.full((b,), top_k), torch.full((b,), top_p, dtype=f32)]
        params += [torch.zeros(b, dtype=f32), torch.arange(b) + seed, torch.zeros(b, dtype=torch.int64)]
        params = [p.to(self.device) for p in params]  # static buffers: the graph reads the step's offset from them

        def choose(logits: torch.Tensor) -> torch.Tensor:
            return self.sample(logits, *params)

        first = choose(logits)
        step[0].copy_(first)
        out = [[t] for t in first.tolist()]
        graph = None
        for _ in range(new_tokens - 1):
            advance()
            params[-1].add_(1)  # the next step's draw
            if not self.graphs:
                chosen = choose(self.forward(*step))
            else:
                if graph is None:  # the first step compiles every kernel, then is captured
                    self.forward(*step)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        chosen = choose(self.forward(*step))
                graph.replay()
            for o, t in zip(out, chosen.tolist(), strict=True):
                o.append(t)
            step[0].copy_(chosen)
        return out

    def prefill(self, prompts: list[list[int]], new_tokens: int) -> tuple[torch.Tensor, list, Callable[[], None]]:
        """The prompts in one packed call, blocks reserved for ``new_tokens`` more each: the logits of each prompt's
        last position, a decode step's inputs (static buffers; the first holds the prefill's greedy tokens) and
        ``advance()``, which refills the others for the next token (its slot, position, table row and length)."""
        width = -(-(max(map(len, prompts)) + new_tokens) // self.block_size)
        blocks: list[list[int]] = [[] for _ in prompts]
        lengths = [len(p) for p in prompts]

        def slots(b: int, first: int, end: int) -> list[int]:
            while len(blocks[b]) * self.block_size < end:
                blocks[b].append(self.free.pop())  # a new block when a sequence grows past its last one
            return [blocks[b][p // self.block_size] * self.block_size + p % self.block_size for p in range(first, end)]

        i32 = torch.int32

        def tensor(values: list, dtype: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=self.device)

        def table() -> torch.Tensor:
            return tensor([ids + [0] * (width - len(ids)) for ids in blocks], i32)

        starts = [0, *itertools.accumulate(lengths)]
        written = [s for b, p in enumerate(prompts) for s in slots(b, 0, len(p))]
        packed = [tensor([t for p in prompts for t in p]), tensor([i for n in lengths for i in range(n)])]
        packed += [tensor(written), table(), tensor(lengths, i32), tensor(starts, i32), tensor(starts[1:]) - 1]
        logits = self.forward(*packed)
        # a decode step's inputs: static buffers, refilled before each step (a CUDA graph replays with their values)
        step = [logits.argmax(-1), tensor(lengths), tensor(lengths), table(), tensor(lengths, i32)]
        step += [tensor(list(range(len(prompts) + 1)), i32), tensor(list(range(len(prompts))))]

        def advance() -> None:
            nonlocal lengths
            step[2].copy_(tensor([slots(b, n, n + 1)[0] for b, n in enumerate(lengths)]))
            step[1].copy_(tensor(lengths))
            step[3].copy_(table())
            lengths = [n + 1 for n in lengths]
            step[4].copy_(tensor(lengths, i32))

        return logits, step, advance


def pack_fp8(parts: list[tuple[torch.Tensor, torch.Tensor]], fp8: str, device: str) -> tuple[torch.Tensor, ...]:
    """Quantised weights ``[n_i, k]`` (and their scales) packed into one GEMM's ``[sum n_i, k]``, as an engine fuses
    QKV and gate-up: their block scales stack only where each block row lies in one part."""
    if fp8 == "block" and any(values.shape[0] % FP8_BLOCK for values, _ in parts[:-1]):
        raise ValueError(f"--fp8 block packs projections of {FP8_BLOCK}-row multiples only; use --fp8 channel")
    return tuple(torch.cat(tensors).to(device).contiguous() for tensors in zip(*parts, strict=True))


#: --bench: Llama-3-8B's shapes, four layers (random weights); each sequence's prompt, and the batches timed.
LLAMA_8B = Shape(vocab=128256, hidden=4096, intermediate=14336, layers=4, heads=32, kv_heads=8, eps=1e-5, theta=5e5)
BENCH_CONTEXT, BENCH_BATCHES = 1024, (1, 32)
#: --bench's check: the engine's decode logits against Hugging Face's for the same weights and token (bfloat16 both)
LOGITS_TOLERANCE = 5e-2
TITLE = "The example engine's decode step against Hugging Face's"


def bench(out: Path | None, smoke: bool) -> int:
    """--bench: one decode step after a prompt of :data:`BENCH_CONTEXT` tokens a sequence, at each batch of
    :data:`BENCH_BATCHES`: this engine (with each GPU backend's kernels) against the same random
    ``LlamaForCausalLM`` with Hugging Face's ``StaticCache`` under ``torch.compile(fullgraph=True)``, both captured in
    CUDA graphs and replayed (``benchmarks/bench_harness.py``'s graph mode), µs a step; the engine's logits checked
    against Hugging Face's first. ``--smoke``: tiny shapes on the CPU, stream time, the script's logic only.
    Writes ``engine.{md,json}`` into ``out`` (default ``benchmarks/results/<device>/``) after each batch."""
    from transformers import LlamaConfig, LlamaForCausalLM

    harness = bench_harness()
    device = harness.start(argparse.Namespace(device="cpu" if smoke else None, smoke=smoke, out=out))
    shape, context, batches = (Shape(), 24, (2,)) if smoke else (LLAMA_8B, BENCH_CONTEXT, BENCH_BATCHES)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    status = harness.backends("triton,tilelang" if device == "cuda" else "torch")
    config = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, rms_norm_eps=shape.eps, rope_theta=shape.theta,
                         max_position_embeddings=context + 16)  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    _, weights = from_hugging_face(model)
    env = harness.environment(device, status) | {"model": shape.__dict__, "context": context}
    backends = [name for name, problem in status.items() if problem is None]
    rows: list[dict[str, Any]] = []
    folder = out or harness.folder(device)
    for batch in batches:  # the files first say what runs, so a run cut at its time limit still leaves them
        running = {"batch": batch, "context": context, "impl": "(all)", "error": "running: the run stopped here"}
        harness.write(folder, "engine", TITLE, env, [*rows, running], render(harness, [*rows, running], env))
        prompts = torch.randint(0, shape.vocab, (batch, context), generator=torch.Generator().manual_seed(batch))
        timed = bench_batch(harness, model, Engines(shape, weights, dtype, device, backends), prompts)
        peer = timed["Hugging Face StaticCache + torch.compile"].get("us")
        for name, timing in timed.items():
            ratio = peer / timing["us"] if peer and timing.get("us") else None
            rows.append({"batch": batch, "context": context, "impl": name, **timing, "vs_hf": ratio})
        written = harness.write(folder, "engine", TITLE, env, rows, render(harness, rows, env))
    print(f"wrote {written} and its .json")
    return 0 if all(row.get("us") for row in rows) else 1


def bench_harness() -> Any:
    """``benchmarks/bench_harness.py`` as a module (its folder is not put on ``sys.path``)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_harness.py"
    spec = importlib.util.spec_from_file_location("bench_harness", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"--bench needs the checkout's {path}")
    module = sys.modules["bench_harness"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Engines:
    """What builds an engine of each backend for one batch: the model's shape and weights, where it runs."""

    shape: Shape
    weights: dict[str, torch.Tensor]
    dtype: torch.dtype
    device: str
    backends: list[str]

    def build(self, backend: str, sequences: int, context: int) -> Engine:
        lazyops.configure(backend=backend)
        try:
            blocks = sequences * -(-(context + 16) // 16)
            return Engine(self.shape, self.weights, self.dtype, self.device, num_blocks=blocks, max_len=context + 16)
        finally:
            lazyops.configure(backend=None)


def bench_batch(harness: Any, model: Any, engines: Engines, prompts: torch.Tensor) -> dict[str, dict[str, Any]]:
    """One decode step of ``prompts`` (``[batch, context]``) timed: Hugging Face's, then each engine's, interleaved
    (a CUDA graph on a GPU); each engine's logits judged against Hugging Face's for the same token first."""
    from transformers import StaticCache

    batch, context = prompts.shape
    device = engines.device
    cache = StaticCache(config=model.config, max_cache_len=context + 16)
    ids, position = prompts.to(device), torch.tensor([context], device=device)
    with torch.inference_mode():
        first = model(ids, past_key_values=cache, cache_position=torch.arange(context, device=device))
        token = first.logits[:, -1].argmax(-1, keepdim=True)
        expected = model(token, past_key_values=cache, cache_position=position).logits[:, -1].float()
    compiled = torch.compile(model, fullgraph=True, dynamic=False)

    def hugging_face(_: str) -> tuple[Callable[[], torch.Tensor], list[tuple]]:
        return (lambda: compiled(token, past_key_values=cache, cache_position=position).logits[:, -1]), [()]

    def engine_step(backend: str) -> Callable[[str], tuple[Callable[[], torch.Tensor], list[tuple]]]:
        def setup(_: str) -> tuple[Callable[[], torch.Tensor], list[tuple]]:
            engine = engines.build(backend, batch, context)
            _, step, advance = engine.prefill(prompts.tolist(), 1)
            advance()
            step[0].copy_(token[:, 0])  # the token Hugging Face's step reads
            return (lambda: engine.forward(*step)), [()]

        return setup

    def check(case: Any, logits: torch.Tensor) -> None:
        if case.kind == "lazyops":
            harness.judge([logits.float()], [expected], LOGITS_TOLERANCE)

    cases = [harness.Case("Hugging Face StaticCache + torch.compile", "peer", hugging_face)]
    cases += [harness.Case(f"lazyops engine, {name}", "lazyops", engine_step(name)) for name in engines.backends]
    mode = "graph" if device == "cuda" else "stream"
    with torch.inference_mode():
        return harness.measure(cases, f"decode {batch} x {context}", mode, device, graph_s=0.1, check=check)


def render(harness: Any, rows: list[dict[str, Any]], env: dict[str, Any]) -> list[str]:
    model = env["model"]
    table = [
        [row["batch"], row["impl"], harness.figure(row.get("us"), 1, row.get("noisy")),
         f"{row['vs_hf']:.2f}×" if row.get("vs_hf") else "", row.get("error", "")[:160]]
        for row in rows
    ]  # fmt: skip
    return [
        f"One decode step of a {model['layers']}-layer model of Llama-3-8B's shapes (random weights), after a "
        f"{env['context']}-token prompt a sequence: µs a step (in a CUDA graph on a GPU: up to 50 steps captured, "
        "replayed), × Hugging Face's (> 1: the engine is faster). Each engine's logits are within "
        f"{LOGITS_TOLERANCE} (relative) of Hugging Face's before it is timed.",
        "",
        *harness.table(["batch", "implementation", "µs a step", "× Hugging Face", "note"], table),
        "Goal (issue 39): ≥ 1.0× Hugging Face at batch 1 and 32.",
        "",
    ]


#: ``--model``: the layers' kind, and each one's tiny random Hugging Face model of ``--hf``.
MODELS = ("llama", "qwen3-moe")


def hugging_face_model(kind: str, **config: Any) -> torch.nn.Module:
    """A tiny random ``LlamaForCausalLM`` or ``Qwen3MoeForCausalLM`` (2 layers, hidden 64, 4 heads of 16, 2 KV
    heads, vocab 128; Qwen3-MoE's: 8 experts of 32, 2 a token, renormalised), float32; ``config`` overrides."""
    import transformers

    sizes = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
    sizes |= {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
    moe = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True}
    made = (transformers.Qwen3MoeConfig if kind == "qwen3-moe" else transformers.LlamaConfig)(
        **(sizes | (moe if kind == "qwen3-moe" else {}) | config)
    )
    torch.manual_seed(0)
    model = (transformers.Qwen3MoeForCausalLM if kind == "qwen3-moe" else transformers.LlamaForCausalLM)(made)
    return model.eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--hf", action="store_true", help="a tiny random Hugging Face model's weights; compare tokens")
    parser.add_argument("--model", choices=MODELS, default="llama", help="the layers' kind (default llama)")
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--temperature", type=float, default=0.0, help="sample_tl's (default 0: greedy)")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", help="default: float32 on a CPU, bfloat16 on a GPU")
    parser.add_argument("--bench", action="store_true", help="time a decode step against Hugging Face (bench())")
    parser.add_argument("--out", type=Path, help="--bench: the result files' folder (default results/<device>/)")
    parser.add_argument("--smoke", action="store_true", help="--bench on tiny shapes, on the CPU: the logic only")
    parser.add_argument("--fp8", choices=sorted(FP8_SCALES), help="fp8 weights (block- or channel-wise scales)")
    args = parser.parse_args()
    if args.fp8 and args.hf:
        parser.error("--fp8 or --hf, not both: --fp8 runs the random model beside its float32 twin, not beside HF")
    if args.fp8 and args.model == "qwen3-moe":
        parser.error("--fp8 serves the dense Llama model only: fused_moe_tl takes no fp8 experts yet")
    if args.bench:
        return bench(args.out, args.smoke)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype or ("bfloat16" if device == "cuda" else "float32"))
    prompts = [[1, 7, 42, 9, 3], [5, 11], [2, 8, 64, 100, 17, 33, 90]]
    shape = QWEN3_MOE if args.model == "qwen3-moe" else Shape()
    weights = random_weights(shape)
    if args.hf:
        try:
            model = hugging_face_model(args.model)
        except ImportError:
            raise SystemExit("--hf needs transformers: pip install 'lazyops[transformers]'") from None
        shape, weights = from_hugging_face(model)
    with torch.inference_mode():
        engine = Engine(shape, weights, dtype, device, fp8=args.fp8)
        ours = engine.generate(prompts, args.tokens, args.temperature, args.top_k, args.top_p, args.seed)
        if device == "cuda":
            how = (
                "replayed from a CUDA graph"
                if engine.graphs
                else "eager (torch backend's " + ", ".join(engine.host_checked) + ": index values checked on the host)"
            )
            print("decode steps:", how)
        print("lazyops:     ", ours)
        if args.hf:
            model, n = model.to(device), args.tokens
            greedy = (
                model.generate(torch.tensor([p], device=device), max_new_tokens=n, do_sample=False) for p in prompts
            )
            theirs = [t[0, len(p) :].tolist() for t, p in zip(greedy, prompts, strict=True)]
            print("transformers:", theirs)
            return int(ours != theirs)
        if args.fp8:
            plain = Engine(shape, dequantised_weights(weights, args.fp8), torch.float32, device)
            theirs = plain.round_activations(args.fp8).generate(prompts, args.tokens, args.temperature, args.top_k,
                                                                 args.top_p, args.seed)  # fmt: skip
            print("float32:     ", theirs, "(dequantised weights, activations rounded as the fp8 engine's)")
            return int(ours != theirs and dtype == torch.float32)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
