"""``python -O`` strips ``assert`` statements: no check of lazyops may be one, or under ``-O`` the conformance kit
passes every kernel and ``lazyops doctor`` says "all good" of a wrong one."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import lazyops

SRC = Path(lazyops.__file__).resolve().parent


def test_no_module_of_lazyops_uses_assert():
    found = [
        f"{path.relative_to(SRC.parent)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Assert)
    ]
    assert not found, f"assert statements in src/ (python -O removes them; raise an error instead): {found}"


#: Run under ``python -O``: a softmax 1 % off, judged by check_case and by run_conformance (on a backend that wraps
#: the torch backend's kernels, registered by entry point as a third party's would be).
UNDER_O = """
    import sys
    import torch
    import lazyops.testing as testing
    from lazyops._backends.torch.softmax import softmax_tl

    print("optimize", sys.flags.optimize)

    def one_percent_off(n, dtype):
        right = softmax_tl(n, dtype)
        return lambda x, *, out=None: right(x) * 1.01

    case = testing.Case("softmax_tl", (100, torch.float16), {}, (5,), seed=7)
    for name, check in [
        ("check_case", lambda: testing.check_case(one_percent_off, case, device="cpu")),
        ("check_close", lambda: testing.check_close(torch.ones(3, dtype=torch.float16) * 1.01, torch.ones(3),
                                                    torch.float16)),
        ("check_each", lambda: testing.check_each(torch.ones(3, dtype=torch.float16) * 1.01, torch.ones(3),
                                                  torch.float16, "residual")),
        ("run_conformance", lambda: testing.run_conformance("offbyone", kernels=["softmax_tl"], max_examples=5)),
    ]:
        try:
            check()
        except testing.ConformanceError as refusal:
            print(name, "refused:", str(refusal).splitlines()[-1].strip())
        else:
            print(name, "ACCEPTED")
"""

OFF_BY_ONE_PERCENT = '''
    """A backend whose softmax is 1 % off."""
    from lazyops._backends.torch.softmax import softmax_tl as _right
    from lazyops.specs.softmax import spec

    @spec.implementation
    def softmax_tl(config):
        right = _right(config.n, config.dtype)
        return lambda x: right(x) * 1.01
'''


def test_the_kit_refuses_a_wrong_kernel_under_python_O(fake_backends):
    package = fake_backends.root / "lazyops_fake_offbyone"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(OFF_BY_ONE_PERCENT))
    fake_backends.register("offbyone", package.name, "fake-offbyone")
    env = fake_backends.env()
    env.pop("PYTHONOPTIMIZE", None)
    ran = subprocess.run(
        [sys.executable, "-O", "-c", textwrap.dedent(UNDER_O)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.fspath(fake_backends.root),
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "optimize 1"
    verdicts = dict(line.split(" ", 1) for line in lines[1:])
    assert sorted(verdicts) == ["check_case", "check_close", "check_each", "run_conformance"]
    assert all(verdict.startswith("refused:") for verdict in verdicts.values()), ran.stdout
    assert "relative error" in verdicts["check_case"]
