"""Compiling, caching and launching the TileLang programs: what every kernel module shares.

The factories call :func:`compiled` at warm-up, so a kernel's first call launches a ready binary instead of
waiting seconds for nvcc. Two caches sit behind it: one in this process, keyed by the kernel's canonical static
configuration (a factory called twice with the same arguments gets the same compiled kernel), and TileLang's own
on-disk cache, keyed by the program's text (a new process compiles nothing it compiled before).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lazyops._backends import is_installed
from lazyops._backends._ways_out import MIN_CAPABILITY, cuda_capability, select_another
from lazyops._errors import BackendError, KernelInputError

if TYPE_CHECKING:
    import torch

#: TileLang's name for float32, the dtype every kernel's math runs in.
F32 = "float32"
#: TileLang's name for each dtype the kernels take.
TL_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
#: TileLang's name for ``torch.float8_e4m3fn``, the fp8 norms' output (its ``float8_e4m3`` is the same format
#: on NVIDIA, but says less).
FP8 = "float8_e4m3fn"
#: The type of the run-time sizes the row-wise programs and rope take: the token count ``M`` and the row strides.
#: TileLang binds a dynamic size as the type it is declared with, narrowing the tensor's 64-bit size or stride on
#: the host without a check: declared int32, a row stride of 2**31 elements or more wrapped negative and the kernel
#: read and wrote outside its tensors (issue 27). In int64 every row offset is computed in 64 bits, the row index
#: from the block index included (TileLang already widens an address that may pass 2**31, but not a row index
#: compared with ``M``).
INDEX = "int64"

#: Base-address alignment the compiled kernels may assume. TileLang vectorises global accesses up to 16 bytes
#: and declares its buffers with TVM's default 64-byte data alignment; a contiguous view that starts
#: mid-allocation (``x[1:]``) need not honour that, so such an argument is copied to a fresh allocation first
#: (see :func:`aligned`). Fresh torch allocations are 512-byte aligned and never copied.
ALIGNMENT = 64

_compiled: dict[Hashable, Any] = {}
_key_locks: dict[Hashable, threading.Lock] = {}
_locks_lock = threading.Lock()


def tl_dtype(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: the name a TileLang program is built with."""
    return TL_DTYPES[str(dtype).removeprefix("torch.")]


def unavailable_reason() -> str | None:
    """Why this backend's kernels cannot run here, or None when they can; the way out offered is one that works
    here (``select_another``).

    TileLang is only looked up, not imported (that takes seconds); torch is imported to ask for a CUDA device.
    """
    if not is_installed("tilelang"):
        return (
            "TileLang is not installed; install it with: pip install 'lazyops[tilelang]', or "
            f"{select_another('tilelang')}"
        )
    capability = cuda_capability()
    if capability is None:
        return (
            f"no CUDA device found; TileLang kernels run on NVIDIA GPUs (sm_80 or newer); {select_another('tilelang')}"
        )
    if capability < MIN_CAPABILITY:
        import torch

        return (
            f"the GPU {torch.cuda.get_device_name()!r} has compute capability {capability[0]}.{capability[1]}; "
            f"TileLang kernels need sm_80 or newer; {select_another('tilelang')}"
        )
    return None


def require_gpu(factory: str) -> None:
    """Refuse at warm-up, with the way out, instead of failing later at launch with a driver error."""
    reason = unavailable_reason()
    if reason is not None:
        raise BackendError(f"{factory}: backend 'tilelang' cannot run here: {reason}", backend="tilelang")


def refuse_unsupported(kernel: str, config: Any, reason: str | None) -> None:
    """Refuse a configuration these programs are not built for (``reason`` not None) before anything compiles: a
    direct ``build``/``programs()`` call. Through lazyops' namespace the spec's ``supports`` hook declines it first."""
    if reason:
        raise KernelInputError(
            f"{config.label}: backend 'tilelang' does not serve it: {reason}; select the 'torch' or 'triton' backend "
            f"for it (through lazyops.{kernel} it comes from the next backend that serves it)"
        )


def compiled(label: str, programs: Mapping[Any, Callable[[], Any]]) -> dict[Any, Any]:
    """The compiled kernel of each program variant of one static configuration, compiling those not yet built.

    ``label`` names the configuration (``rmsnorm_tl(n=4096, dtype=torch.bfloat16, eps=1e-06)``): with the variant
    it keys the in-process cache. Each key has its own lock: threads warming up the same kernel compile it once,
    while different kernels compile side by side (nvcc runs as a subprocess, so threads do overlap); the missing
    variants of one configuration compile in parallel.
    """
    require_gpu(label)
    keys = {variant: (label, variant) for variant in programs}
    with _locks_lock:
        by_id = {id(lock): lock for lock in (_key_locks.setdefault(key, threading.Lock()) for key in keys.values())}
    locks = [by_id[ident] for ident in sorted(by_id)]  # one global order, so no deadlock
    for lock in locks:
        lock.acquire()
    try:
        missing = [variant for variant, key in keys.items() if key not in _compiled]
        if missing:
            built = _compile(label, [programs[variant]() for variant in missing])
            for variant, kernel in zip(missing, built, strict=True):
                _compiled[keys[variant]] = kernel
        return {variant: _compiled[key] for variant, key in keys.items()}
    finally:
        for lock in locks:
            lock.release()


def _compile(factory: str, programs: list[Any]) -> list[Any]:
    import tilelang

    try:
        with quiet_tilelang():
            if len(programs) == 1:
                return [tilelang.compile(programs[0], target="cuda")]
            # tilelang.par_compile is this loop plus a tqdm bar; the threads overlap because nvcc is a subprocess.
            from concurrent.futures import ThreadPoolExecutor

            workers = min(len(programs), os.cpu_count() or 1)
            with ThreadPoolExecutor(workers, thread_name_prefix="lazyops-tilelang") as pool:
                return list(pool.map(lambda program: tilelang.compile(program, target="cuda"), programs))
    except Exception as error:
        raise BackendError(
            f"{factory}: TileLang failed to compile the kernel ({type(error).__name__}: {error}); "
            f"{select_another('tilelang')}, and report the configuration",
            backend="tilelang",
        ) from error


_quiet_lock = threading.Lock()
_quiet_depth = 0
_level_before = logging.NOTSET


@contextlib.contextmanager
def quiet_tilelang() -> Iterator[None]:
    """TileLang's INFO lines (two per compile, plus cache keys) kept quiet while lazyops compiles.

    A server warming up dozens of kernels would otherwise print a screenful on every start. Only TileLang's own
    default level (INFO, set when it is imported) is raised to WARNING: warnings and errors still show, and a user
    who set another level (``tilelang.set_log_level("DEBUG")``) keeps it. Nested and concurrent compiles share one
    raise, undone when the last one ends.
    """
    global _quiet_depth, _level_before
    logger = logging.getLogger("tilelang")
    with _quiet_lock:
        if _quiet_depth == 0:
            _level_before = logger.level
            if logger.level == logging.INFO:
                logger.setLevel(logging.WARNING)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                logger.setLevel(_level_before)


def launchable(tensor: torch.Tensor, row_multiple: int = 1) -> torch.Tensor:
    """``tensor``, or a fresh contiguous copy of it when a view left its address misaligned (see
    :data:`ALIGNMENT`) or its row stride (``stride(0)``, for two or more dimensions) is not a multiple of
    ``row_multiple`` elements, the multiple a strided program assumes so that its rows take 16-byte vectors."""
    rows_fit = row_multiple == 1 or tensor.dim() < 2 or tensor.stride(0) % row_multiple == 0
    if rows_fit and tensor.data_ptr() % ALIGNMENT == 0:
        return tensor
    import torch

    return tensor.clone(memory_format=torch.contiguous_format)


def aligned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, or a copy of it at an aligned address when a view left it misaligned.

    Only a read-only argument may go through here: a copy of an output would be written and then dropped.
    """
    return launchable(tensor)


def direct(kernel: Any) -> Callable[..., Any]:
    """``kernel``'s compiled executable, called without TileLang's per-call wrapper where that wrapper has nothing
    to do; otherwise ``kernel`` itself.

    A compiled kernel's call goes through ``JITKernel.__call__`` and the TVM-FFI adapter's ``func``, which counts
    the arguments, finds the device, walks the parameters to allocate outputs and prepares the device (for NPUs
    only), then calls the executable. Every program here takes its outputs as arguments (no ``out_idx``), so on
    CUDA all of that ends in ``executable(*args)``, with the executable's own checks of every argument's shape,
    dtype and device. The wrapper's own time was about a tenth of a call's host time under cProfile on the H200.
    Anything else (another adapter or TileLang version, outputs the adapter allocates) keeps the ordinary call.
    """
    adapter: Any = getattr(kernel, "adapter", None)
    get_executable = getattr(adapter, "_get_executable", None)
    if (
        type(adapter).__name__ != "TVMFFIKernelAdapter"
        or getattr(adapter, "result_idx", None)
        or getattr(adapter, "_ffi_callee_allocated_output_abi", False)
        or not callable(get_executable)
    ):
        called: Callable[..., Any] = kernel
        return called
    executable: Callable[..., Any] = get_executable()
    return executable


def launch_with_copies(
    kernel: Any, args: Sequence[torch.Tensor], written: Sequence[int] = (), row_multiples: Sequence[int] | None = None
) -> None:
    """Launch ``kernel(*args)``, where the arguments at the positions in ``written`` are written (in place, or an
    ``out``), swapping each argument the program cannot take as it is (misaligned, or a row stride off the multiple
    in ``row_multiples``, see :func:`launchable`) for a contiguous copy; the written ones are copied back
    afterwards, so the caller's tensors hold the result whatever their layout. An ``out`` that is an input
    (``out_aliases``) is swapped exactly when that input is, so the program still reads every element of a row
    before writing it.

    The launches call this only when an argument needs a copy (rare: the copies cost a little), and the kernel
    directly otherwise, so that the common call is one frame."""
    multiples = row_multiples or (1,) * len(args)
    launch = [launchable(arg, multiple) for arg, multiple in zip(args, multiples, strict=True)]
    kernel(*launch)
    for index in written:
        if launch[index] is not args[index]:
            args[index].copy_(launch[index])


def launch_out_of_place(
    spec: Any, kernel: Any, row_multiple: int = 1, written: Sequence[int] = ()
) -> Callable[..., None]:
    """The launch ``launch(*inputs, out)`` of a compiled ``main(*inputs, out)`` that reads its inputs and writes
    ``out`` (``writes_out=True``). Its row inputs and ``out`` may be row-strided (``strided_rows=True``) with a
    row stride that is a multiple of ``row_multiple`` elements; other strides, and misaligned views, go through
    contiguous copies (:func:`launch_with_copies`). ``written``: the inputs it also updates in place."""
    multiples = (*(row_multiple if name in spec.row_inputs else 1 for name in spec.inputs), row_multiple)
    out_index = (*written, len(spec.inputs))
    kernel = direct(kernel)

    def launch(*args: torch.Tensor) -> None:
        for arg, multiple in zip(args, multiples, strict=True):
            if arg.data_ptr() % ALIGNMENT or (multiple != 1 and arg.dim() > 1 and arg.stride(0) % multiple):
                launch_with_copies(kernel, args, out_index, multiples)
                return
        kernel(*args)

    return launch
