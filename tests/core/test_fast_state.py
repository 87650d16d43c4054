"""``lazyops.resolve_all()``: every kernel stored and ``__getattr__`` out of the module dict, until ``configure()``.

Observed in fresh interpreters: the fast state changes the module itself, which this test process shares with every
other test.
"""

from __future__ import annotations

import json
import sys

import pytest

from fresh_interpreter import run_python


def report_of(code: str, env: dict[str, str]) -> dict:
    result = run_python(code, env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_resolve_all_drops_the_hook_keeps_the_objects_and_configure_restores_it(fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])
    code = """
    import json, lazyops
    before = {kernel: getattr(lazyops, kernel) for kernel in lazyops.kernels()}
    hook_before = "__getattr__" in vars(lazyops)
    unresolved = lazyops.resolve_all()
    hook_after = "__getattr__" in vars(lazyops)
    same = all(getattr(lazyops, kernel) is obj for kernel, obj in before.items())
    again = lazyops.resolve_all()
    try:
        lazyops.rmsnrom_tl
    except AttributeError as error:
        misspelt = [type(error).__name__, "Did you mean" in str(error)]
    lazyops.configure(backend="ext")
    restored = "__getattr__" in vars(lazyops)
    dropped = sorted(set(before) & set(vars(lazyops)))
    from_ext = list(lazyops.rmsnorm_tl()[:2])
    try:
        lazyops.rmsnrom_tl
    except AttributeError as error:
        suggestion = "Did you mean" in str(error)
    second = lazyops.resolve_all()
    print(json.dumps(dict(hook_before=hook_before, unresolved=unresolved, hook_after=hook_after, same=same,
                          again=again, misspelt=misspelt, restored=restored, dropped=dropped, from_ext=from_ext,
                          suggestion=suggestion, second=second, hook_second="__getattr__" in vars(lazyops),
                          ext_now=list(lazyops.rmsnorm_tl()[:2]))))
    """
    report = report_of(code, fake_backends.env())
    assert report["hook_before"] and not report["hook_after"]
    assert report["unresolved"] == [] and report["again"] == []
    assert report["same"]  # the very objects the lazy path had stored
    assert report["misspelt"] == ["AttributeError", False]  # the one visible difference: no did-you-mean
    assert report["restored"] and report["dropped"] == []
    assert report["from_ext"] == ["ext", "rmsnorm_tl"]  # resolved afresh, from the newly chosen backend
    assert report["suggestion"]
    assert report["second"] == [] and not report["hook_second"]
    assert report["ext_now"] == ["ext", "rmsnorm_tl"]


def test_reset_restores_the_hook(fake_backends):
    code = """
    import json, lazyops
    lazyops.resolve_all()
    hidden = "__getattr__" not in vars(lazyops)
    lazyops._state().reset()
    print(json.dumps(dict(hidden=hidden, restored="__getattr__" in vars(lazyops),
                          kernel=callable(lazyops.rmsnorm_tl))))
    """
    assert report_of(code, fake_backends.env()) == {"hidden": True, "restored": True, "kernel": True}


def test_a_kernel_without_a_source_keeps_the_hook_and_is_returned(fake_backends):
    fake_backends.make("ext", ["rmsnorm_tl"])
    code = """
    import json, lazyops
    unresolved = lazyops.resolve_all()
    try:
        lazyops.softmax_tl
        raised = None
    except lazyops.KernelUnavailableError as error:
        raised = error.kernel
    print(json.dumps(dict(unresolved=unresolved, kernels=lazyops.kernels(), hook="__getattr__" in vars(lazyops),
                          raised=raised)))
    """
    report = report_of(code, fake_backends.env(LAZYOPS_BACKEND="ext", LAZYOPS_STRICT="1"))
    assert report["unresolved"] == [k for k in report["kernels"] if k != "rmsnorm_tl"]
    assert report["hook"]
    assert report["raised"] == "softmax_tl"  # the access still explains itself


def test_eager_import_reaches_the_fast_state(fake_backends):
    code = """
    import json, lazyops
    print(json.dumps(dict(hook="__getattr__" in vars(lazyops),
                          stored=all(kernel in vars(lazyops) for kernel in lazyops.kernels()))))
    """
    assert report_of(code, fake_backends.env(EAGER_IMPORT="1")) == {"hook": False, "stored": True}


@pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.version_info < (3, 11), reason="CPython's specialising interpreter"
)
def test_cpython_specialises_the_kernel_read_only_in_the_fast_state(fake_backends):
    code = """
    import dis, json, lazyops

    def opcode_after_warmup():
        def read():
            return lazyops.rmsnorm_tl
        for _ in range(200):
            read()
        return [i.opname for i in dis.get_instructions(read, adaptive=True) if i.opname.startswith("LOAD_ATTR")]

    lazyops.rmsnorm_tl
    lazy = opcode_after_warmup()
    lazyops.resolve_all()
    fast = opcode_after_warmup()
    print(json.dumps(dict(lazy=lazy, fast=fast)))
    """
    report = report_of(code, fake_backends.env())
    assert report["lazy"] != ["LOAD_ATTR_MODULE"]
    assert report["fast"] == ["LOAD_ATTR_MODULE"]
