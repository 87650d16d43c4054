"""What the built-in backends need to run, checked on this machine: the facts their ``unavailable_reason()``
messages are made of, and the ways out those messages offer.

A message that says "select 'triton'" on a machine where Triton cannot run, or "set TRITON_INTERPRET=1" where the
package ``triton`` is not installed, sends the user into a second error. So each backend's message builds its
"select ..." clause with :func:`select_another`, from the same checks its own reason is made of: a way out is
offered only where it works on the machine that prints it.

Nothing heavy is imported: packages are looked up, not imported; torch is imported only where a driver file
suggests a GPU (see ``lazyops._backends.has_cuda_device``).
"""

from __future__ import annotations

import os

from lazyops._backends import has_cuda_device, is_installed

#: The values of TRITON_INTERPRET that Triton itself reads as true (its ``getenv_bool``).
_TRUE = frozenset({"1", "true", "on"})
#: Oldest compute capability the TileLang kernels are built and tested for.
MIN_CAPABILITY = (8, 0)


def interpreter_requested() -> bool:
    """Whether ``TRITON_INTERPRET`` asks Triton to run kernels in its interpreter (read as Triton reads it)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRUE


def cuda_capability() -> tuple[int, int] | None:
    """The visible GPU's compute capability, or None without one."""
    if not has_cuda_device():
        return None
    import torch

    major, minor = torch.cuda.get_device_capability()
    return major, minor


def triton_runs() -> bool:
    return is_installed("triton") and (interpreter_requested() or has_cuda_device())


def tilelang_runs() -> bool:
    capability = cuda_capability()
    return is_installed("tilelang") and capability is not None and capability >= MIN_CAPABILITY


def alternatives(excluding: str) -> list[str]:
    """The built-in backends besides ``excluding`` that run here, as a user selects each: ``'tilelang'``,
    ``'triton'``, ``'torch'`` (always: it is lazyops' dependency), then ``'triton' with TRITON_INTERPRET=1`` where
    Triton is installed but has no GPU. Fastest first."""
    found = []
    if excluding != "tilelang" and tilelang_runs():
        found.append("'tilelang'")
    triton = excluding != "triton" and is_installed("triton")
    on_the_cpu = triton and not has_cuda_device() and not interpreter_requested()
    if triton and not on_the_cpu:
        found.append("'triton'")
    if excluding != "torch":
        found.append("'torch'")
    if on_the_cpu:
        found.append("'triton' with TRITON_INTERPRET=1")
    return found


def select_another(excluding: str) -> str:
    """``select 'torch', or 'triton' with TRITON_INTERPRET=1``: the "select" clause of ``excluding``'s message."""
    choices = alternatives(excluding)
    if not choices:
        return "select another backend (LAZYOPS_BACKEND)"
    return "select " + (", ".join(choices[:-1]) + ", or " + choices[-1] if len(choices) > 1 else choices[0])
