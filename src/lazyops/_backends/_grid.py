"""How many thread blocks a CUDA launch takes, and the refusal of a call that needs more, shared by the GPU backends.

A grid past these limits is not launched (CUDA answers ``invalid argument``, after the arguments were prepared), and
one past 2**32 blocks along x is worse: a launcher that narrows the count to 32 bits runs a truncated grid and leaves
rows unwritten. So a kernel whose grid grows with the token count refuses a call beyond its limit before launching,
with a ``KernelInputError`` that names the way out. Where a grid cannot reach a limit (a row kernel's, whose blocks
each take at least one row of a tensor that fits in memory) nothing is checked.
"""

from __future__ import annotations

from lazyops._errors import KernelInputError

#: Thread blocks along a grid's first dimension (``gridDim.x``).
MAX_GRID_X = 2**31 - 1
#: Thread blocks along its second and third (``gridDim.y``, ``gridDim.z``).
MAX_GRID_YZ = 65535


def refuse_rows(label: str, tensor: str, rows: int, most: int, why: str) -> None:
    """Raise the ``KernelInputError`` for a call of ``rows`` rows of ``tensor`` where the kernel's launch covers at
    most ``most`` (``why``: how its grid covers them). Call it only once the count is found too large: the check
    itself (one comparison) stays at the call site, on the hot path."""
    raise KernelInputError(
        f"{label}: {tensor} has {rows} rows, more than the {most} one launch covers ({why}); split the call into "
        f"calls of at most {most} rows"
    )
