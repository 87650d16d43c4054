"""What a GPU backend cannot build, it declines (``spec.implementation(supports=...)``); it never refuses it at
factory time.

A configuration its ``supports`` hook declines resolves to the next backend that serves it (``lazyops.which``
says so before anything is built); one its factory refuses instead (a ``KernelInputError`` from building the
launch) stops resolution there, and the user gets an error where the next backend would have served them (issue
33's item 3: Triton's attention answered ``which`` for head dims past 256, then refused them at build time).

For every kernel of every GPU backend, each of the spec's drawn configurations and its edges (each integer
argument of the factory moved to 1, odd and power-of-two sizes past the tiles' limits) is given to the factory:
one it builds, or cannot build here for want of a GPU (``BackendError``), passes; one it refuses with a
``KernelInputError`` passes only where its ``supports`` declined it; any other exception fails. Nothing is
launched: Triton's factories only plan their launch, and TileLang's are made to stop where they would compile.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from lazyops._errors import BackendError, KernelInputError
from lazyops.specs import spec
from lazyops.testing._classes import class_cases

#: The backends that build a launch per configuration (the torch backend serves every configuration).
GPU_BACKENDS = ("triton", "tilelang")
#: The values each integer argument of a drawn configuration is moved to: the smallest, odd, and past every
#: backend's tile limits (head dims past 256, rows past a fused block of 16384).
EDGES = (1, 3, 17, 96, 257, 512, 16385)


def factory_of(backend: str, kernel: str) -> Any:
    if backend == "tilelang":
        pytest.importorskip("tilelang")
    else:
        pytest.importorskip(backend)
    try:
        return getattr(importlib.import_module(f"lazyops._backends.{backend}"), kernel)
    except AttributeError:  # a kernel a backend lacks yet (TileLang's MoE kernels): nothing to decline
        pytest.skip(f"backend {backend!r} lacks {kernel}")


def configurations(kernel: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The spec's drawn configurations (one per class) and their edges, each one the spec accepts."""
    kernel_spec = spec(kernel)
    found: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def add(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            config = kernel_spec.bind(*args, **kwargs)
        except KernelInputError:
            return  # the spec refuses it, whatever the backend
        found.setdefault(config.label, (args, kwargs))

    for case in class_cases(kernel, draws=40):
        add(case.args, dict(case.kwargs))
        for index, value in enumerate(case.args):
            if type(value) is int:
                for edge in EDGES:
                    add((*case.args[:index], edge, *case.args[index + 1 :]), dict(case.kwargs))
        for name, value in case.kwargs.items():
            if type(value) is int and name not in ("max_seq_len", "sliding_window"):
                for edge in EDGES:
                    add(case.args, {**case.kwargs, name: edge})
    return list(found.values())


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_a_factory_refuses_only_what_its_backend_declines(backend, kernel, monkeypatch):
    """``kernel``: every specified kernel (the kernel tests' fixture). Any other exception at factory time fails
    too: a configuration the spec accepts is built, declined, or refused for want of a device."""
    factory = factory_of(backend, kernel)
    if backend == "tilelang":  # on a GPU too: what is refused is refused before compiling, so compile nothing
        from lazyops._backends.tilelang import _runtime

        monkeypatch.setattr(_runtime, "unavailable_reason", lambda: "this test compiles nothing")
    supports = getattr(factory, "lazyops_supports", None)
    refused = []
    for args, kwargs in configurations(kernel):
        try:
            factory(*args, **kwargs)
        except BackendError:
            continue  # cannot run here (TileLang without a GPU): no verdict on the configuration
        except KernelInputError as error:
            config = spec(kernel).bind(*args, **kwargs)
            if supports is None or not supports(config):
                refused.append(f"{config.label}: {error}")
        except Exception as error:  # noqa: BLE001 (every other exception is reported, by configuration)
            refused.append(f"{spec(kernel).bind(*args, **kwargs).label}: {type(error).__name__}: {error}")
    assert not refused, (
        f"{backend}'s {kernel} refuses at factory time configurations its supports= hook does not decline (so "
        "resolution never reaches the next backend):\n" + "\n".join(refused)
    )


def test_which_falls_through_from_triton_past_its_head_dims():
    """Issue 33's call: Triton declines head dim 512, and the torch backend serves it."""
    pytest.importorskip("triton")
    import lazyops
    from lazyops._api import configured

    with configured(backend="triton,torch"):
        assert lazyops.which("paged_attention_tl", 2, 1, 512, "float32", block_size=4).backend == "torch"
        kernel = lazyops.paged_attention_tl(2, 1, 512, "float32", block_size=4)
        assert kernel is not None
