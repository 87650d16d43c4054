"""What lazyops costs on the host: its import, its first access at an engine's start-up, and every call.

    python benchmarks/bench_host.py                        # this CPU, every part: results/cpu/host.{md,json}
    python benchmarks/bench_host.py --parts calls          # on the H200: its host's per-call costs, results/h200/host.*
    python benchmarks/bench_host.py --smoke --out /tmp/h   # the script's logic, few samples

Parts (``--parts``; medians of fresh interpreters or of interleaved samples): ``import``, ``import lazyops``' own
cumulative time (``-X importtime``, bytecode compiled as in a wheel), the modules it imports, and a resolved kernel's
read against a plain module attribute; ``startup``, what a server's start pays with torch imported: ``import
lazyops``, the first ``lazyops.rmsnorm_tl`` (torch backend), a second kernel, and with a third-party backend of
``--sizes`` kernels installed the first access of one of its kernels and ``dir(lazyops)``; ``calls``, µs per call at
one token (3000 back-to-back calls, one synchronize): around a no-op launch (lazyops' own cost), the torch backend,
torch's own op, the kernel through its ``torch.library`` operator (what an eager call would pay without the
compile-only routing), and for softmax and layernorm the lightest checked wrapper anyone could write (the compile
router, dtype, width and grad mode in one frame): the floor of any kernel that checks its arguments in Python.
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

import bench_harness as harness

SRC = harness.ROOT / "src"


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--parts", default="import,startup,calls", help="comma list (default: all three)")
    parser.add_argument("--runs", type=int, default=21, help="fresh interpreters per figure (default 21)")
    parser.add_argument("--sizes", default="10,1000,10000", help="kernels of the synthetic backends (startup)")
    options = parser.parse_args(argv)
    device = harness.start(options)
    runs, smoke = 2 if options.smoke else options.runs, options.smoke
    sizes = [10] if smoke else [int(size) for size in options.sizes.split(",")]
    parts = {
        "import": lambda: import_part(runs, smoke),
        "startup": lambda: startup_part(runs, sizes),
        "calls": lambda: calls_part(device, smoke),
    }
    env, rows, body = harness.environment(device), [], []
    for part in options.parts.split(","):
        if part not in parts:
            sys.exit(f"--parts: no part {part!r}; choose from {', '.join(parts)}")
        found, lines = parts[part]()
        rows, body = rows + found, body + lines
    written = harness.write(options.out, "host", "What lazyops costs on the host", env, rows, body)
    print(f"wrote {written} and its .json")
    return 0


def fresh_env() -> dict[str, str]:
    """This environment without lazyops' variables, lazyops' source first, bytecode written (as a wheel has it)."""
    compileall.compile_dir(str(SRC / "lazyops"), quiet=1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAZYOPS_", "EAGER_IMPORT"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run(code: str, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, *flags, "-c", textwrap.dedent(code)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode:
        sys.exit(f"a fresh interpreter failed:\n{code}\n{result.stderr}")
    return result


# --- import --------------------------------------------------------------------------------------------------------


def import_part(runs: int, smoke: bool) -> tuple[list[dict], list[str]]:
    env = fresh_env()
    own: list[int] = []
    modules: list[str] = []
    for _ in range(runs):
        stderr = run("import lazyops", env, "-X", "importtime").stderr
        lines = [line.split("|") for line in stderr.splitlines() if "|" in line]
        names = [row[2].rstrip() for row in lines[1:]]
        end = next(i for i, name in enumerate(names) if name.strip() == "lazyops")
        own.append(int(lines[end + 1][1]))  # importtime lists a package's imports before the package itself
        depth, modules = len(names[end]) - len(names[end].lstrip()), []
        for name in reversed(names[:end]):  # lazyops' subtree: the run of deeper rows just before it
            if len(name) - len(name.lstrip()) <= depth:
                break
            modules.append(name.strip())
    reads = json.loads(run(READS.format(number=10_000 if smoke else 2_000_000), env).stdout)
    median = statistics.median(own)
    rows = [{"part": "import", "figure": "import lazyops, own µs", "median": median, "min": min(own), "max": max(own)}]
    rows += [{"part": "import", "figure": f"read {name}, ns", "median": ns} for name, ns in reads.items()]
    ratio = reads["lazyops.rmsnorm_tl"] / reads["plain.rmsnorm_tl"]
    lines = [
        "## `import lazyops`",
        "",
        f"Own cumulative time (`python -X importtime`, {runs} fresh interpreters): median **{median:,.0f} µs** "
        f"({min(own):,}–{max(own):,}). Modules imported on its behalf: {', '.join(sorted(modules)) or 'none'}.",
        "",
        *harness.table(
            ["attribute read (best of 7 repeats)", "ns"], [[f"`{k}`", f"{v:.1f}"] for k, v in reads.items()]
        ),
        f"A resolved kernel read after `lazyops.resolve_all()`, against the same object on a plain module: "
        f"**{ratio:.2f}×**.",
        "",
    ]
    return rows, lines


READS = """
import json, math, timeit, types
import lazyops
lazyops.resolve_all()
plain = types.ModuleType("plain")
plain.rmsnorm_tl = lazyops.rmsnorm_tl
names = {{"lazyops.rmsnorm_tl": "lazyops.rmsnorm_tl", "plain.rmsnorm_tl": "plain.rmsnorm_tl", "math.pi": "math.pi"}}
scope = {{"lazyops": lazyops, "plain": plain, "math": math}}
print(json.dumps({{name: min(timeit.repeat(code, globals=scope, number={number}, repeat=7)) / {number} * 1e9
                  for name, code in names.items()}}))
"""


# --- startup -------------------------------------------------------------------------------------------------------

FIRST = """
import json, time
import torch
{pre}
t0 = time.perf_counter()
import lazyops
t1 = time.perf_counter()
lazyops.{first}
t2 = time.perf_counter()
{then}
t3 = time.perf_counter()
print(json.dumps([(t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t2) * 1e6]))
"""


#: One installation to start in: ``kernels`` of a synthetic backend (0: the built-ins alone), the code run before
#: ``import lazyops``, the kernel accessed first, and what is timed after it.
Startup = namedtuple("Startup", "kernels pre first then then_label env")


def startup_part(runs: int, sizes: list[int]) -> tuple[list[dict], list[str]]:
    base = fresh_env()
    with tempfile.TemporaryDirectory(prefix="lazyops-host-") as folder:
        builtin = {**base, "LAZYOPS_BACKEND": "torch"}
        setups = [Startup(0, "", "rmsnorm_tl", "lazyops.softmax_tl", "softmax_tl, first access", builtin)]
        for size in sizes:
            root = Path(folder) / str(size)
            package = synthetic_backend(root, size)
            env = {**base, "PYTHONPATH": os.pathsep.join([str(root), base["PYTHONPATH"]]), "LAZYOPS_BACKEND": "scale"}
            then = f"assert len(dir(lazyops)) > {size}"
            setups.append(Startup(size, f"import {package}.k0", "k0_tl", then, "dir(lazyops)", env))
        samples: dict[int, list[list[float]]] = {setup.kernels: [] for setup in setups}
        for _ in range(runs):  # every installation in turn each round: a slow spell of the machine falls on all
            for setup in setups:
                code = FIRST.format(pre=setup.pre, first=setup.first, then=setup.then)
                samples[setup.kernels].append(json.loads(run(code, setup.env).stdout))
    rows, body = [], []
    for setup in setups:
        imported, first, then = (statistics.median(column) for column in zip(*samples[setup.kernels], strict=True))
        label = "the built-in backends" if setup.kernels == 0 else f"+ a backend of {setup.kernels:,} kernels"
        figures = {"import_us": imported, "first_us": first, "then_us": then}
        rows.append({"part": "startup", "kernels": setup.kernels, **figures})
        body.append([label, f"{imported:,.0f}", f"{first:,.0f} ({setup.first})", f"{then:,.0f} ({setup.then_label})"])
    lines = [
        "## At an engine's start-up (torch imported first)",
        "",
        f"µs, medians of {runs} fresh interpreters. A built-in kernel's first access includes its module's import "
        "(the torch backend selected: no GPU library's import counted); a synthetic backend's kernel module is "
        "imported before it, so that column is lazyops' own.",
        "",
        *harness.table(["installed", "`import lazyops`", "first kernel access", "then"], body),
    ]
    return rows, lines


def synthetic_backend(root: Path, size: int) -> str:
    """A third-party backend of ``size`` kernels installed under ``root`` as a wheel installs one: its package with
    a stub, and a ``.dist-info`` registering it as backend ``scale``."""
    package = f"lazyops_scale_{size}"
    directory = root / package
    directory.mkdir(parents=True)
    (directory / "__init__.py").write_text(
        "import lazy_loader\n__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)\n"
    )
    stub = [f"from .k{i} import k{i}_tl as k{i}_tl" for i in range(size)]
    (directory / "__init__.pyi").write_text("\n".join(stub) + "\n")
    for i in range(size):
        (directory / f"k{i}.py").write_text(f"def k{i}_tl(*args, **kwargs):\n    return {i}\n")
    dist_info = root / f"{package}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(f"[lazyops.backends]\nscale = {package}\n")
    compileall.compile_dir(str(directory), quiet=1)
    installed = time.time_ns() - 60 * 1_000_000_000  # as an installed package's files are: not just written
    for path in [*directory.rglob("*"), directory, *dist_info.rglob("*"), dist_info, root]:
        os.utime(path, ns=(installed, installed))
    return package


# --- calls ---------------------------------------------------------------------------------------------------------


def calls_part(device: str, smoke: bool) -> tuple[list[dict], list[str]]:
    import torch

    from lazyops.specs import kernel_names

    rows, body = [], []
    columns = ["no-op launch", "torch backend", "torch op", "through the operator", "lightest checked wrapper"]
    with torch.inference_mode():
        for name in kernel_names():
            short = name.removesuffix("_tl")
            config, args, calls = kernel_calls(name, device, smoke)
            cases = [
                harness.Case(label, "peer", lambda _, fn=fn, args=args: (fn, [args])) for label, fn in calls.items()
            ]
            timed = harness.measure(cases, name, "host", device, rounds=5)
            row = {"part": "calls", "kernel": short, "config": config.label}
            row.update({label: timing.get("us") for label, timing in timed.items()})
            row.update({f"{label} noisy": timing.get("noisy") for label, timing in timed.items()})
            row.update({f"{label} error": timing["error"] for label, timing in timed.items() if "error" in timing})
            rows.append(row)
            body.append([short, *(_cell(timed.get(label, {})) for label in columns)])
    lines = [
        "## Per call at one token (µs)",
        "",
        "3000 back-to-back calls, one synchronize at the end, the columns interleaved over 5 rounds; each kernel "
        "at its engine-sized configuration (on a CPU the GEMM clamped to 256 x 256).",
        "",
        *harness.table(["kernel", *columns], body),
    ]
    return rows, lines


def kernel_calls(name: str, device: str, smoke: bool) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Kernel ``name``'s configuration, its inputs at one token, and the calls compared on them."""
    import torch

    from lazyops.specs import spec
    from lazyops.testing import Inputs, examples

    kernel_spec, short = spec(name), name.removesuffix("_tl")
    # on a CPU, a GEMM at the engine's size would time the arithmetic, not the call: clamped to 256
    small = smoke or (short == "matmul" and not device.startswith("cuda"))
    chosen = harness.engine().example(name, torch.bfloat16, small=small)
    config = kernel_spec.bind(*chosen.args, **chosen.kwargs)
    args = tuple(examples(kernel_spec).example_inputs(config, 1, Inputs(0, device), chosen.geometry))
    noop = kernel_spec.implementation(
        lambda config: lambda *launched: None,
        device_type=device.split(":", maxsplit=1)[0],
        backend="bench",
        strided_rows=True,
        writes_out=True,
    )
    ours = harness.factory("torch", name)(*chosen.args, **chosen.kwargs)
    calls = {"no-op launch": noop(*chosen.args, **chosen.kwargs), "torch backend": ours}
    if short in harness.TORCH_OPS:  # attention has no one torch op to set beside it
        calls["torch op"] = harness.TORCH_OPS[short](config)
    calls["through the operator"] = harness.through_operator(ours)
    if short in FLOOR:
        calls["lightest checked wrapper"] = FLOOR[short](torch, config)
    return config, args, calls


def _cell(timing: dict[str, Any]) -> str:
    return "error" if "error" in timing else harness.figure(timing.get("us"), 2, timing.get("noisy"))


def _checked_softmax(torch: Any, config: Any) -> Any:
    # looked up once, as a kernel built by a factory would: the floor is the checks, not the lookups
    compiling, grad_enabled, softmax = torch.compiler.is_compiling, torch.is_grad_enabled, torch.softmax
    dtype, n = config.dtype, config.n

    def checked(x: Any) -> Any:
        if compiling() or x.dtype is not dtype or x.shape[-1] != n or (x.requires_grad and grad_enabled()):
            raise RuntimeError("not timed")
        return softmax(x, -1)

    return checked


def _checked_layernorm(torch: Any, config: Any) -> Any:
    compiling, grad_enabled, layer_norm = torch.compiler.is_compiling, torch.is_grad_enabled, torch.layer_norm
    dtype, n, eps = config.dtype, config.n, config.eps

    def checked(x: Any, weight: Any, bias: Any) -> Any:
        if compiling() or x.dtype is not dtype or x.shape[-1] != n or (x.requires_grad and grad_enabled()):
            raise RuntimeError("not timed")
        return layer_norm(x, (n,), weight, bias, eps)

    return checked


#: The lightest checked wrapper of a kernel that is one native op: what DESIGN.md asks of every call, nothing more.
FLOOR = {"softmax": _checked_softmax, "layernorm": _checked_layernorm}


if __name__ == "__main__":
    sys.exit(main())
