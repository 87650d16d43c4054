"""Launching a compiled Triton kernel directly, without ``JITFunction.run``'s per-call argument binding.

``kernel[grid](*args, **constexprs)`` binds every argument, computes the specialization key (each pointer's
16-byte alignment, each specialized integer's divisibility), hashes it and looks the binary up: tens of
microseconds of host time per call, more than the kernels themselves take at decode sizes. A factory knows
everything but the per-call values once, so :class:`Launcher` does the lookup once per specialization: the first
call with a new key goes through ``JITFunction.run`` (which compiles if needed and returns the compiled kernel),
later calls with the same key hand the arguments straight to the compiled kernel's launcher, as ``run`` itself
does at its end (Triton >= 3.3).

The key this module computes must be as fine as Triton's, or a binary specialized for aligned pointers would be
handed a misaligned one: pointers by element type and 16-byte alignment; every integer by its width (``i32``, or
``i64`` past 32 bits, specialized or not); integers not in ``do_not_specialize`` also by ``== 1`` and
``% 16 == 0``; TMA descriptors by element type and block shape; plus the device. Row strides are such
integers: contiguous rows of 4096 and a packed view's odd stride are two binaries, one that may assume
16-element-aligned rows and one that may not. Anything this module does not recognise (the interpreter, an older
Triton without ``knobs``) takes the ordinary path. Launch hooks (a profiler's) are passed on as Triton passes
them.
"""

from __future__ import annotations

from typing import Any

import torch

try:  # Triton >= 3.4 keeps its runtime switches in knobs; older ones take the ordinary path
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - depends on the installed Triton
    _knobs = None

try:  # Triton >= 3.4 describes TMA copies on the host (the TMA GEMM's arguments)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - depends on the installed Triton
    TensorDescriptor = None


class Launcher:
    """``launcher(grid, *args)``: ``kernel[grid](*args, **constexprs, **options)``, the binary looked up once.

    ``args`` are the kernel's runtime parameters in order; ``constexprs`` its compile-time parameters, which must
    all follow the runtime ones in the kernel's signature (the launch passes them in that order).
    """

    def __init__(self, kernel: Any, constexprs: dict[str, Any], **options: Any) -> None:
        self.kernel = kernel
        self.constexprs = constexprs
        self.options = options
        self._binaries: dict[tuple[Any, ...], Any] = {}
        names = list(getattr(kernel, "arg_names", ()))
        self._direct = _knobs is not None and type(kernel).__name__ == "JITFunction" and bool(names)
        if self._direct:
            runtime = names[: len(names) - len(constexprs)]
            if [name for name in names if name in constexprs] != names[len(runtime) :]:
                raise ValueError(f"{kernel}: the compile-time parameters must come last in the signature")
            self._tail = tuple(constexprs[name] for name in names[len(runtime) :])
            skipped = set(getattr(kernel, "do_not_specialize", ()) or ())
            self._specialized = tuple(
                index not in skipped and name not in skipped for index, name in enumerate(runtime)
            )
            from triton.runtime import driver

            self._driver = driver

    def __call__(self, grid: tuple[int, ...], *args: Any) -> None:
        # One frame a launch: the key and the hooks are computed here, not in helpers, because this runs on every
        # launch of every kernel and each Python call would be paid there.
        if not self._direct:
            self.kernel[grid](*args, **self.constexprs, **self.options)
            return
        active = self._driver.active
        device = active.get_current_device()
        # The key (see the module's docstring), flat and built with the fewest calls: 5.3 against 7.2 µs for a
        # tuple per argument, rmsnorm's nine arguments on this project's CPU. ``value & 15`` is ``value % 16`` for
        # negative integers too.
        parts: list[Any] = [device]
        append = parts.append
        tensor = torch.Tensor
        descriptor = TensorDescriptor
        for value, specialized in zip(args, self._specialized, strict=False):
            kind = type(value)
            if kind is tensor or (kind is not int and kind is not float and isinstance(value, tensor)):
                append(value.dtype)
                append(not value.data_ptr() & 15)
            elif kind is descriptor:  # Triton specializes a TMA descriptor by its element type and block
                append(value.base.dtype)
                append(tuple(value.block_shape))
            elif kind is int:
                if specialized:
                    append(value == 1)
                    append(not value & 15)
                append(-0x80000000 <= value <= 0x7FFFFFFF)
        key = tuple(parts)
        binary = self._binaries.get(key)
        if binary is None:
            binary = self.kernel[grid](*args, **self.constexprs, **self.options)
            if hasattr(binary, "result"):  # an asynchronous compile hands back a future
                binary = binary.result()
            self._binaries[key] = binary
            return
        # From here on what JITFunction.run does once it has its binary, launch hooks (a profiler's) included.
        # Triton keeps them in knobs as hook chains, empty unless something registered one; an empty chain is
        # passed as None, which the launcher skips, where Triton would build the hooks' metadata and call the empty
        # chain twice on every launch. (Triton >= 3.4 keeps an empty ``HookChain`` there; older ones None.)
        stream = active.get_current_stream(device)
        runtime = _knobs.runtime
        enter_hook = runtime.launch_enter_hook
        if enter_hook is not None and type(enter_hook).__name__ == "HookChain" and not enter_hook.calls:
            enter_hook = None
        exit_hook = runtime.launch_exit_hook
        if exit_hook is not None and type(exit_hook).__name__ == "HookChain" and not exit_hook.calls:
            exit_hook = None
        values = (*args, *self._tail)
        grid_x = grid[0]
        grid_y = grid[1] if len(grid) > 1 else 1
        grid_z = grid[2] if len(grid) > 2 else 1
        binary.run(
            grid_x,
            grid_y,
            grid_z,
            stream,
            binary.function,
            binary.packed_metadata,
            None if enter_hook is None else binary.launch_metadata(grid, stream, *values),
            enter_hook,
            exit_hook,
            *values,
        )
