"""Hypothesis strategies for kernel inputs: the sizes and dtypes where ports go wrong.

Feature sizes mix powers of two with their neighbours, odd sizes and rows wider than one block (Triton loops past
16384), because a kernel tuned on 4096 is most often wrong at 4095 or 20000. Token counts run from one to a few
hundred; a case calls one kernel with several of them, zero included, because an engine does.
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import strategies as st

from lazyops.specs._params import Rows
from lazyops.testing._case import Case, Layout
from lazyops.testing._compare import DTYPES

#: Widths that stress block boundaries; drawn alongside arbitrary small ones.
FEATURE_SIZES = (1, 3, 64, 100, 128, 1000, 1024, 4096, 5000, 8192, 16384, 20000)


def dtypes() -> st.SearchStrategy[torch.dtype]:
    """float32, float16, bfloat16: every dtype a kernel must serve."""
    return st.sampled_from(DTYPES)


def token_counts(max_tokens: int = 300) -> st.SearchStrategy[int]:
    """A token count ``M`` from 1 to ``max_tokens``."""
    return st.integers(1, max_tokens)


def token_sequences(max_tokens: int = 300) -> st.SearchStrategy[tuple[int, ...]]:
    """The ``M`` of each call of one kernel: a first call with tokens, then up to two more of any size, zero too."""
    later = st.sampled_from([0, 1, 17]) | token_counts(max_tokens)
    return st.tuples(token_counts(max_tokens), st.lists(later, max_size=2)).map(lambda drawn: (drawn[0], *drawn[1]))


def feature_sizes(sizes: tuple[int, ...] = FEATURE_SIZES, max_small: int = 600) -> st.SearchStrategy[int]:
    """A feature width: one of ``sizes`` (block boundaries and their neighbours) or any width up to ``max_small``."""
    return st.sampled_from(sizes) | st.integers(1, max_small)


def seeds() -> st.SearchStrategy[int]:
    """The seed of one example's inputs (fresh data for every example, reproducible from it)."""
    return st.integers(0, 2**32 - 1)


def epsilons(mean_square: float = 1.0) -> st.SearchStrategy[float]:
    """Norm epsilons: the usual ones, and one large enough to matter beside rows of this ``mean_square`` (half of
    it): a kernel that forgets ``eps`` is then off by 18 % there, which even a float8 output resolves."""
    return st.sampled_from([1e-6, 1e-5, 0.5 * mean_square])


def norm_options() -> dict[str, st.SearchStrategy]:
    """The norms' keyword options: a float32 weight under 16-bit activations (Gemma, LayerNorm checkpoints), and
    Gemma's ``1 + weight`` scaling."""
    return {
        "weight_dtype": st.sampled_from([None, torch.float32]),
        "weight_offset": st.sampled_from([0.0, 1.0]),
    }


def norm_cases(spec: Any) -> st.SearchStrategy[Case]:
    """The RMSNorm family's cases: widths, dtypes, epsilons and the weight options. The rows normalised are the sum
    of the row inputs (add_rmsnorm: x and a residual drawn 4 times wider), so epsilons are drawn at their mean
    square."""
    mean_square = sum(param.scale**2 for param in spec.params if isinstance(param, Rows))
    return row_cases(spec.name, epsilons(mean_square), **norm_options())


def row_cases(
    kernel: str,
    epsilons: st.SearchStrategy[float] | None = None,
    geometry: st.SearchStrategy[dict] | None = None,
    **options: st.SearchStrategy,
) -> st.SearchStrategy[Case]:
    """Examples of a row-wise kernel ``factory(n, dtype[, eps=...][, option=...])``: widths, dtypes, token counts,
    seeds, and each keyword argument drawn from its strategy (``approximate=st.sampled_from(["none", "tanh"])``)."""

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        n = draw(feature_sizes())
        dtype = draw(dtypes())
        kwargs = {} if epsilons is None else {"eps": draw(epsilons)}
        kwargs.update({name: draw(strategy) for name, strategy in options.items()})
        shape = {} if geometry is None else draw(geometry)
        return Case(kernel, (n, dtype), kwargs, draw(token_sequences()), draw(seeds()), shape)

    return draw_case()


def layouts(kernel: str) -> st.SearchStrategy[Layout]:
    """How ``kernel``'s calls lay out their tensors (:class:`lazyops.testing.Layout`): contiguous ``[M, n]`` half
    of the time, else any mix of leading dimensions, strided rows (a padded, offset or packed buffer), and for a
    kernel that returns a tensor a preallocated ``out=`` or the input it may alias."""
    from lazyops.specs import spec

    kernel_spec = spec(kernel)
    outs = ["new"]
    if kernel_spec.returns == "out":
        outs += ["given"] + (["alias"] if kernel_spec.out_aliases else [])
    floating_rows = [name for name in kernel_spec.row_inputs if name != "positions"]
    drawn = st.builds(
        Layout,
        lead=st.sampled_from([1, 2, 3]),
        row_pad=st.sampled_from([0, 1, 8, 64]),
        offset=st.sampled_from([0, 0, 3, 16]),
        packed=st.booleans() if len(floating_rows) > 1 else st.just(False),
        out=st.sampled_from(outs),
    )
    return st.just(Layout()) | drawn


def cases(kernel: str, factory: Any = None) -> st.SearchStrategy[Case]:
    """Whole conformance examples (:class:`lazyops.testing.Case`) for ``kernel`` (``"rmsnorm_tl"``): the spec's
    configurations, token counts and seeds, each with a drawn :func:`layouts`. Given a backend's ``factory``, only
    the configurations it serves: one it declines (``spec.implementation(supports=...)``) is another backend's to
    serve, not a failure of this one."""
    from dataclasses import replace

    from lazyops.specs import spec
    from lazyops.testing.cases import examples

    drawn = st.builds(
        lambda case, layout: replace(case, layout=layout), examples(spec(kernel)).cases(), layouts(kernel)
    )
    return drawn if factory is None else drawn.filter(lambda case: declined(factory, case) is None)


def declined(factory: Any, case: Case) -> str | None:
    """Why ``factory`` declines ``case``'s configuration, or ``None`` where it serves it (or says nothing)."""
    supports = getattr(factory, "lazyops_supports", None)
    if supports is None:
        return None
    from lazyops.specs import spec

    reason: str | None = supports(spec(case.kernel).bind(*case.args, **case.kwargs))
    return reason
