"""Every global a Triton kernel reads is one the compiler accepts. The interpreter (the only Triton this CI has)
reads any Python global, but the compiler refuses a plain ``int`` or ``float`` global ("Cannot access global variable
... from within @jit'ed function"): a kernel that passes every CPU test then fails at its first launch on a GPU, as
``quant_fp8_tl``'s ``MIN_AMAX`` did. This holds the rule the compiler enforces, without a GPU: each global name a
``@triton.jit`` function's code reads is a ``tl.constexpr``, another jitted function, a module, or a builtin."""

from __future__ import annotations

import builtins
import dis
import importlib
import pkgutil
import types

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


def _jitted_functions() -> list[tuple[str, object]]:
    import lazyops._backends.triton as package

    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, value in vars(module).items():
            fn = getattr(value, "fn", None)
            if isinstance(fn, types.FunctionType) and fn.__module__ == module.__name__:
                found.append((f"{module.__name__}.{name}", value))
    return found


def _refused_globals(jitted: object) -> list[str]:
    fn = jitted.fn  # type: ignore[attr-defined]
    code_names: set[str] = set()
    stack = [fn.__code__]
    while stack:  # nested code (comprehensions) reads globals too
        code = stack.pop()
        code_names |= {op.argval for op in dis.get_instructions(code) if op.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    refused = []
    for name in sorted(code_names & fn.__globals__.keys()):
        value = fn.__globals__[name]
        if isinstance(value, tl.constexpr | types.ModuleType) or hasattr(value, "fn"):
            continue
        if getattr(value, "__module__", "").startswith("triton") or value is getattr(builtins, name, None):
            continue
        refused.append(f"{name} = {value!r}")
    return refused


def test_the_triton_backend_has_jitted_kernels_to_check() -> None:
    assert len(_jitted_functions()) >= 20


@pytest.mark.parametrize("name_and_kernel", _jitted_functions(), ids=lambda pair: pair[0].rsplit(".", 2)[-2:][-1])
def test_a_jitted_function_reads_only_globals_the_compiler_accepts(name_and_kernel: tuple[str, object]) -> None:
    name, jitted = name_and_kernel
    refused = _refused_globals(jitted)
    assert not refused, (
        f"{name} reads globals that Triton's compiler refuses on a GPU (the interpreter accepts them): {refused}; "
        "wrap each in tl.constexpr(...) where it is defined, or pass it as a tl.constexpr argument"
    )
