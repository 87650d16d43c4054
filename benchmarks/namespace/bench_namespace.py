"""The namespace's own costs on the CPU; writes benchmarks/namespace/results.md (issue 12, "The namespace").

    python benchmarks/namespace/bench_namespace.py [--interpreters 7] [--imports 21] [--firsts 11]

Every figure comes from fresh interpreters (``PYTHONPATH=src``, no ``LAZYOPS_*`` or ``EAGER_IMPORT``, bytecode
compiled first as an installed wheel has it):

1. Reading a resolved kernel. Three kinds of interpreter, run in turn (``--interpreters`` of each): ``lazyops.
   rmsnorm_tl`` after its first access (the hook still in the module), the same object read from a plain
   ``types.ModuleType`` made for the purpose, and ``lazyops.rmsnorm_tl`` after ``lazyops.resolve_all()``. Each
   times its read with ``timeit`` (7 repeats of 1,000,000 after a warm-up, so CPython's specialisation has happened)
   and keeps the median repeat; the table gives the median over interpreters. The empty loop (``pass``) is timed
   the same way, so the net cost of the read is shown too.
2. ``import lazyops`` own time: ``python -X importtime -c "import lazyops"``, lazyops' cumulative µs, median of
   ``--imports`` interpreters.
3. First resolution beyond the kernel module's import. The clean measure: import the kernel module first
   (``lazyops._backends.torch.rmsnorm``, which brings torch), then ``import lazyops`` and time the first
   ``lazyops.rmsnorm_tl``: what is left is exactly what lazyops adds. It is split into the one-time part (importing
   the namespace's own modules that the first access loads, ``lazyops._namespace`` and ``lazyops._cache``), the
   work (the first access after that), and the first access of a second kernel (the per-kernel cost). The
   subtraction the issue names (first access minus ``import lazyops._backends.torch.rmsnorm``, each in its own
   interpreters) is given too, with its spread: torch's import varies by far more than what it subtracts.
   The same interpreters time the import of an empty module of a package (bytecode compiled): the floor of any
   first access that loads code not loaded by ``import lazyops``.

lazyops keeps what it reads from stubs and entry points in an on-disk cache (``lazyops._cache``): the figures are
taken with it warm (``LAZYOPS_CACHE_DIR`` in a temporary folder, filled by one run first), as every process but the
first after an install finds it; the first access is also timed with an empty cache (a new folder each time).
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
OUT = Path(__file__).resolve().parent / "results.md"
sys.path.insert(0, str(ROOT / "benchmarks"))

from import_time import one_import  # noqa: E402  (the -X importtime parser the import-time benchmark uses)

READ = """
import json, statistics, timeit, types
import lazyops

kernel = lazyops.rmsnorm_tl                      # its first access
mode = {mode!r}
if mode == "after resolve_all":
    assert lazyops.resolve_all() == () and "__getattr__" not in vars(lazyops)
    target = lazyops
elif mode == "plain module":
    target = types.ModuleType("plain")
    target.rmsnorm_tl = kernel
else:
    target = lazyops
    assert "__getattr__" in vars(target)
assert target.rmsnorm_tl is kernel


def per_read(statement):
    timer = timeit.Timer(statement, globals={{"target": target}})
    timer.timeit(200_000)                        # warm-up: the loop's attribute read specialises
    runs = timer.repeat(repeat=7, number=1_000_000)
    return statistics.median(runs) / 1_000_000 * 1e9


print(json.dumps(dict(read=per_read("target.rmsnorm_tl"), loop=per_read("pass"))))
"""

# The kernel modules first: everything they import (torch included) is then no part of what is timed.
FIRST_CLEAN = """
import json, sys, time
import lazyops._backends.torch.rmsnorm, lazyops._backends.torch.softmax
import lazyops_floor
out = {{}}
t = time.perf_counter_ns(); import lazyops_floor.empty; out["empty_module"] = time.perf_counter_ns() - t
import lazyops
before = set(sys.modules)
split = {split!r}
if split:
    t = time.perf_counter_ns(); import lazyops._namespace, lazyops._cache; out["setup"] = time.perf_counter_ns() - t
t = time.perf_counter_ns(); lazyops.rmsnorm_tl; out["first"] = time.perf_counter_ns() - t
t = time.perf_counter_ns(); lazyops.softmax_tl; out["second"] = time.perf_counter_ns() - t
out["modules"] = sorted(set(sys.modules) - before)
print(json.dumps(out))
"""

FIRST_ACCESS = """
import json, time
import lazyops
t = time.perf_counter_ns(); lazyops.rmsnorm_tl; print(json.dumps(time.perf_counter_ns() - t))
"""

MODULE_IMPORT = """
import json, time
import lazyops
t = time.perf_counter_ns(); import lazyops._backends.torch.rmsnorm; print(json.dumps(time.perf_counter_ns() - t))
"""


def fresh(code: str, env: dict[str, str]):
    command = [sys.executable, "-c", textwrap.dedent(code)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode:
        sys.exit(result.stderr)
    return json.loads(result.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.1f}, min {min(values):.1f}, max {max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpreters", type=int, default=7, help="fresh interpreters per read-cost case")
    parser.add_argument("--imports", type=int, default=21, help="fresh interpreters for import lazyops")
    parser.add_argument("--firsts", type=int, default=11, help="fresh interpreters per first-resolution case")
    args = parser.parse_args()

    compileall.compile_dir(str(SRC / "lazyops"), quiet=1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAZYOPS_", "EAGER_IMPORT"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    temporary = tempfile.TemporaryDirectory(prefix="lazyops-bench-namespace-")
    floor = Path(temporary.name) / "floor"
    (floor / "lazyops_floor").mkdir(parents=True)
    for module in ("__init__.py", "empty.py"):
        (floor / "lazyops_floor" / module).write_text("")
    compileall.compile_dir(str(floor), quiet=1)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(floor)])
    cache = str(Path(temporary.name) / "cache")
    env["LAZYOPS_CACHE_DIR"] = cache
    fresh(FIRST_CLEAN.format(split=False), env)  # fills the cache

    modes = ("before resolve_all", "plain module", "after resolve_all")
    reads: dict[str, list[float]] = {mode: [] for mode in modes}
    loops: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(args.interpreters):
        for mode in modes:  # interleaved, so that a slow spell of the machine hits every case alike
            sample = fresh(READ.format(mode=mode), env)
            reads[mode].append(sample["read"])
            loops[mode].append(sample["loop"])
    read = {mode: statistics.median(reads[mode]) for mode in modes}
    loop = statistics.median(loops["plain module"] + loops["before resolve_all"] + loops["after resolve_all"])

    imports = [one_import(env)[0] for _ in range(args.imports)]

    clean = [fresh(FIRST_CLEAN.format(split=False), env) for _ in range(args.firsts)]
    split = [fresh(FIRST_CLEAN.format(split=True), env) for _ in range(args.firsts)]
    cold = [
        fresh(FIRST_CLEAN.format(split=False), {**env, "LAZYOPS_CACHE_DIR": f"{cache}-cold-{run}"})
        for run in range(args.firsts)
    ]
    accesses, module_imports = [], []
    for _ in range(args.firsts):
        accesses.append(fresh(FIRST_ACCESS, env) / 1000)
        module_imports.append(fresh(MODULE_IMPORT, env) / 1000)

    def us(samples: list[dict], key: str) -> list[float]:
        return [sample[key] / 1000 for sample in samples]

    difference = statistics.median(accesses) - statistics.median(module_imports)
    noise = max(module_imports) - min(module_imports)
    ratio = read["after resolve_all"] / read["plain module"]
    net = {mode: read[mode] - loop for mode in modes}
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [
        "# The namespace's own costs (CPU)",
        "",
        f"Generated on {now:%Y-%m-%d %H:%M} UTC by `{shlex.join(getattr(sys, 'orig_argv', sys.argv))}` on "
        f"{platform.node() or 'this machine'} ({platform.processor() or platform.machine()}, {os.cpu_count()} "
        f"cores), Python {platform.python_version()} ({platform.python_implementation()}). Method: the script's "
        "docstring.",
        "",
        f"## Reading a resolved kernel (ns per read; median over {args.interpreters} fresh interpreters, each the "
        "median of 7 × 1,000,000)",
        "",
        "| read | ns per read | net of the empty loop | × plain module |",
        "| --- | --- | --- | --- |",
        *[
            f"| `{'plain.rmsnorm_tl' if mode == 'plain module' else 'lazyops.rmsnorm_tl'}` {mode} | "
            f"{read[mode]:.1f} | {net[mode]:.1f} | {read[mode] / read['plain module']:.2f} |"
            for mode in modes
        ],
        "",
        f"The empty `timeit` loop costs {loop:.1f} ns per iteration. Per-interpreter values (ns): "
        + "; ".join(f"{mode}: {', '.join(f'{v:.1f}' for v in reads[mode])}" for mode in modes)
        + ".",
        "",
        f"Goal ≤ 1.10× a plain module once every kernel is resolved: **{ratio:.2f}×** "
        f"({'met' if ratio <= 1.10 else 'not met'}).",
        "",
        "## `import lazyops`",
        "",
        f"lazyops' own cumulative time (`python -X importtime`, {args.imports} fresh interpreters, bytecode compiled): "
        f"**median {statistics.median(imports):.0f} µs**, min {min(imports)} µs, max {max(imports)} µs "
        f"(goal ≤ 1000 µs: {'met' if statistics.median(imports) <= 1000 else 'not met'}).",
        "",
        "## First resolution beyond the kernel module's import (µs)",
        "",
        f"Kernel modules imported first, then timed in the same interpreter ({args.firsts} fresh interpreters each):",
        "",
        "| what | µs |",
        "| --- | --- |",
        f"| first `lazyops.rmsnorm_tl`, all of it (goal ≤ 50 µs) | **{spread(us(clean, 'first'))}** |",
        "| of which one-time: importing lazyops' own modules that the first access loads | "
        f"{spread(us(split, 'setup'))} |",
        "| of which the work: first `lazyops.rmsnorm_tl` after that (settings, platform default, kernel list, "
        f"resolution, store) | {spread(us(split, 'first'))} |",
        f"| a second kernel's first access (`lazyops.softmax_tl`) | {spread(us(clean, 'second'))} |",
        f"| first `lazyops.rmsnorm_tl` with an empty cache (the first process after an install) | "
        f"{spread(us(cold, 'first'))} |",
        "| for scale: importing an empty module of a package, same interpreters | "
        f"{spread(us(clean, 'empty_module'))} |",
        "",
        f"Goal ≤ 50 µs for the whole first access: "
        f"{'met' if statistics.median(us(clean, 'first')) <= 50 else 'not met'}.",
        "",
        f"Modules the first access imported: {', '.join(clean[0]['modules']) or 'none'}.",
        "",
        f"The subtraction, each side in its own fresh interpreters after `import lazyops` ({args.firsts} each): first "
        f"`lazyops.rmsnorm_tl` {spread(accesses)} µs; `import lazyops._backends.torch.rmsnorm` {spread(module_imports)}"
        f" µs; difference of medians {difference:.0f} µs, against a spread (max − min) of {noise:.0f} µs in the "
        "module's import alone: the clean measure above is the one to read.",
        "",
    ]
    temporary.cleanup()
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
