"""Check every kernel of every backend against its float64 reference on a GPU, with the conformance kit.

    python3 benchmarks/gpu_conformance.py [--out DIR]                 # on a CUDA machine, every backend
    python3 benchmarks/gpu_conformance.py --backend tilelang --max-examples 10 --merge --out DIR  # add to DIR
    python3 benchmarks/gpu_conformance.py --device cpu --small        # the script's logic, on a CPU

The judge is ``lazyops.testing``, the kit third-party backends check themselves with; this script holds no
tolerance, reference or case of its own. For each backend (by registered name: built-in or third-party) and each
kernel lazyops specifies:

- **drawn**: ``run_conformance(backend, kernels=[kernel], max_examples=N, device=...)``: hypothesis draws shapes,
  dtypes, token counts (zero included) and options from the spec's ``cases()``;
- **grid**: for every dtype, the spec's engine-sized configuration (``spec.benchmark(dtype)``: hidden 4096; rope
  32 + 8 heads of 128; matmul 4096 x 4096) at M = 1, 7, 128, 4096, 32768, each a ``Case`` run by ``check_case``;
- **views**: the same configurations at M = 7 and 4096, every input moved to a contiguous view that starts one
  element into its allocation (misaligned for vector loads and TMA), through ``check_case`` as well. It runs
  last: a kernel that faults on a misaligned address poisons the CUDA context for whatever follows.

``check_case`` draws the inputs from the spec, computes the float64 reference, leaves a NaN-filled block where
the output will be allocated, and judges by relative error with the kit's tolerance per dtype (in-place results
element by element too). Writes ``gpu_conformance.md`` (worst error per kernel x backend x dtype, against the
tolerance) and ``gpu_conformance.json`` (every case) into DIR: ``benchmarks/results`` on CUDA, a temporary
folder with ``--device cpu``. Exits 1 if anything that could run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _environment import describe_environment  # benchmarks/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
GPU_TOKENS = (1, 7, 128, 4096, 32768)
SMALL_TOKENS = (1, 7, 33)
VIEW_TOKENS = (7, 4096)
SMALL_VIEW_TOKENS = (7,)
#: No cut of the token count: the grid's cases are engine-sized on purpose (the kit cuts inputs to stay small).
NO_CUT = 2**62


@dataclass
class Outcome:
    """One part (drawn, grid, views) of one kernel x backend (x dtype, for the grid and views)."""

    backend: str
    kernel: str
    part: str
    dtype: str
    status: str = "pass"  # pass, FAIL, unavailable, not exported
    cases: int = 0
    worst: float = 0.0
    tolerance: float | None = None
    worst_case: str = ""
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def failed(self, message: str) -> None:
        self.status = "FAIL"
        self.errors.append(message)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the results go (default: benchmarks/results on CUDA)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="sizes clamped to 256, few tokens (for a CPU)")
    parser.add_argument("--backend", action="append", default=[], metavar="NAME",
                        help="a backend to check (repeatable; default: every registered one)")
    parser.add_argument("--kernels", help="comma list (default: every specified kernel)")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--tokens", help=f"grid token counts (default: {','.join(map(str, GPU_TOKENS))})")
    parser.add_argument("--max-examples", type=int, help="drawn examples per kernel (default: 25; --small: 5)")
    parser.add_argument("--no-views", action="store_true", help="skip the misaligned-view cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--merge", action="store_true",
                        help="keep what DIR/gpu_conformance.json holds about backends this run does not check "
                             "(one backend per call, each within a time limit)")
    parser.add_argument("--warm-up-threads", type=int, default=16,
                        help="build the grid's factories in this many threads first (TileLang compiles each)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is decorated
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    from lazyops import _bench
    from lazyops.specs import kernel_names

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --small to check the script here", file=sys.stderr)
        return 2
    cuda = args.device == "cuda"
    out = args.out or (ROOT / "benchmarks" / "results" if cuda else Path(tempfile.gettempdir()) / "lazyops-gpu-conformance")
    kernels = [_bench.kernel_name(k) for k in args.kernels.split(",")] if args.kernels else list(kernel_names())
    dtypes = [getattr(torch, name) for name in args.dtypes.split(",")]
    tokens = [int(m) for m in args.tokens.split(",")] if args.tokens else list(SMALL_TOKENS if args.small else GPU_TOKENS)
    view_tokens = [] if args.no_views else list(SMALL_VIEW_TOKENS if args.small else VIEW_TOKENS)
    max_examples = args.max_examples or (5 if args.small else 25)
    status = _bench.backend_status(args.backend or None)
    environment = {
        **describe_environment(torch, args.device, "Triton interpreter"),
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", ""),
        "small": args.small,
        "max_examples": max_examples,
        "seed": args.seed,
        "backends": {name: problem or "runs" for name, problem in status.items()},
    }
    checker = Checker(args.device, args.small, args.seed)
    if args.merge:
        environment["earlier_commands"] = checker.keep_earlier(out / "gpu_conformance.json", set(status))
    started = time.perf_counter()

    def save() -> None:
        write_results(out, checker, environment, time.perf_counter() - started, tokens, view_tokens)

    runnable = []
    for backend, problem in status.items():
        if problem:
            checker.unavailable(backend, kernels, problem)
            continue
        runnable.append(backend)
        checker.warm_up(backend, kernels, dtypes, args.warm_up_threads)
        for kernel in kernels:
            checker.drawn(backend, kernel, max_examples)
            for dtype in dtypes:
                checker.grid(backend, kernel, dtype, tokens)
            save()
        if cuda:  # what one backend left cached must not crowd the next one's largest cases
            torch.cuda.empty_cache()
    for backend in runnable if view_tokens else ():
        for kernel in kernels:
            for dtype in dtypes:
                checker.views(backend, kernel, dtype, view_tokens)
        save()
    save()
    print(render_markdown(checker, environment, time.perf_counter() - started, tokens, view_tokens))
    print(f"results in {out}")
    return 1 if any(o.status == "FAIL" for o in checker.outcomes) else 0


class Checker:
    """Runs the kit's checks and records an :class:`Outcome` per part; nothing it meets stops the run."""

    def __init__(self, device: str, small: bool, seed: int) -> None:
        from lazyops._registry import Registry

        self.device, self.small, self.seed = device, small, seed
        self.registry = Registry.discover()
        self.outcomes: list[Outcome] = []
        self.cases: list[dict[str, Any]] = []

    def keep_earlier(self, path: Path, rechecked: set[str]) -> list[str]:
        """Take over an earlier run's outcomes and cases for the backends this run does not check."""
        if not path.is_file():
            return []
        earlier = json.loads(path.read_text())
        self.outcomes += [Outcome(**o) for o in earlier["summary"] if o["backend"] not in rechecked]
        self.cases += [case for case in earlier["cases"] if case["backend"] not in rechecked]
        environment = earlier["environment"]
        return [*environment.get("earlier_commands", []), environment["command"]]

    def record(self, outcome: Outcome) -> Outcome:
        self.outcomes.append(outcome)
        return outcome

    def unavailable(self, backend: str, kernels: list[str], problem: str) -> None:
        for kernel in kernels:
            self.record(Outcome(backend, short(kernel), "all", "—", "unavailable", errors=[problem]))

    def factory(self, backend: str, kernel: str) -> Callable[..., Any] | None:
        entry = self.registry[backend]
        return entry.kernel(kernel) if kernel in entry.exports() else None

    def warm_up(self, backend: str, kernels: list[str], dtypes: list[Any], threads: int) -> None:
        """Build every grid configuration in parallel, so that a backend compiling per configuration (TileLang)
        overlaps its compiles; a failure here is left for the case that needs the kernel to report."""
        from lazyops import _bench

        def build(job: tuple[str, Any]) -> str | None:
            kernel, dtype = job
            try:
                factory = self.factory(backend, kernel)
                if factory is not None:
                    chosen = _bench.example(kernel, dtype, small=self.small)
                    factory(*chosen.args, **chosen.kwargs)
            except Exception as error:  # noqa: BLE001 - reported again by the case that needs it
                return one_line(error)
            return None

        started = time.perf_counter()
        jobs = [(kernel, dtype) for kernel in kernels for dtype in dtypes]
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            failed = [error for error in pool.map(build, jobs) if error]
        print(f"{backend}: {len(jobs)} configurations built in {time.perf_counter() - started:.1f} s"
              + (f"; {len(failed)} failed, first: {failed[0]}" if failed else ""), flush=True)

    def drawn(self, backend: str, kernel: str, max_examples: int) -> None:
        from lazyops.testing import TOLERANCE, run_conformance

        outcome = self.record(Outcome(backend, short(kernel), "drawn", "all"))
        started = time.perf_counter()
        try:
            report = run_conformance(backend, kernels=[kernel], max_examples=max_examples, device=self.device,
                                     seed=self.seed)
            result = report.results[0]
            if result.status == "not exported":
                outcome.status = "not exported"
            else:
                outcome.cases, outcome.worst = result.examples, result.worst_error
                if result.worst_dtype is not None:
                    outcome.dtype = dtype_name(result.worst_dtype)
                    outcome.tolerance = TOLERANCE[result.worst_dtype]
        except AssertionError as error:  # the report, naming the smallest failing case
            outcome.failed(str(error))
        except Exception as error:  # noqa: BLE001
            outcome.failed(one_line(error))
        outcome.seconds = time.perf_counter() - started
        print(summary_line(outcome), flush=True)

    def grid(self, backend: str, kernel: str, dtype: Any, tokens: list[int]) -> None:
        self.run_cases(backend, kernel, dtype, tokens, "grid", lambda factory: factory)

    def views(self, backend: str, kernel: str, dtype: Any, tokens: list[int]) -> None:
        self.run_cases(backend, kernel, dtype, tokens, "views", misaligned)

    def run_cases(self, backend: str, kernel: str, dtype: Any, tokens: list[int], part: str,
                  wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        from lazyops import _bench
        from lazyops.testing import TOLERANCE, Case
        from lazyops.testing._conformance import judge_case

        outcome = self.record(Outcome(backend, short(kernel), part, dtype_name(dtype), tolerance=TOLERANCE[dtype]))
        started = time.perf_counter()
        try:
            factory = self.factory(backend, kernel)
        except Exception as error:  # noqa: BLE001
            outcome.failed(f"the factory: {one_line(error)}")
            return
        if factory is None:
            outcome.status = "not exported"
            return
        chosen = _bench.example(kernel, dtype, small=self.small)
        for m in tokens:
            case = Case(kernel, chosen.args, dict(chosen.kwargs), (m,), self.seed + m, dict(chosen.geometry))
            entry: dict[str, Any] = {"backend": backend, "kernel": short(kernel), "part": part,
                                     "dtype": outcome.dtype, "M": m, "case": str(case)}
            try:
                error, judged = judge_case(wrap(factory), case, device=self.device, max_elements=NO_CUT)
            except Exception as problem:  # noqa: BLE001 - an assertion of the kit, or a crash: both recorded
                outcome.failed(f"M={m}: {one_line(problem)}")
                entry.update(passed=False, error=one_line(problem), traceback=traceback.format_exc(limit=6))
            else:
                outcome.cases += 1
                entry.update(passed=True, relative_error=error, judged_in=dtype_name(judged))
                # The worst beside its own tolerance: the fp8 norms' float8 output is judged in float8 (6e-2),
                # their residual in the activations' dtype.
                if error / TOLERANCE[judged] >= outcome.worst / outcome.tolerance:
                    outcome.worst, outcome.worst_case, outcome.tolerance = error, f"M={m}", TOLERANCE[judged]
            self.cases.append(entry)
        outcome.seconds = time.perf_counter() - started
        print(summary_line(outcome), flush=True)


def misaligned(factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory``, whose kernels get every tensor as a contiguous view starting one element into its allocation.

    The results go back into the caller's tensors (and the returned inputs are the caller's), so ``check_case``
    judges exactly what it judges for aligned inputs.
    """
    import torch

    def shifted(tensor: Any) -> Any:
        if not isinstance(tensor, torch.Tensor) or tensor.numel() == 0:
            return tensor
        holder = torch.empty(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
        view = holder[1:].view(tensor.shape)
        view.copy_(tensor)
        return view

    def build(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        kernel = factory(*args, **kwargs)

        def call(*tensors: Any) -> Any:
            moved = [shifted(t) for t in tensors]
            returned = kernel(*moved)
            for original, view in zip(tensors, moved):
                if view is not original:
                    original.copy_(view)
            caller = {id(view): original for original, view in zip(tensors, moved)}
            if isinstance(returned, tuple):
                return tuple(caller.get(id(r), r) for r in returned)
            return caller.get(id(returned), returned)

        return call

    return build


# --- results ---------------------------------------------------------------------------------------------------


def short(kernel: str) -> str:
    return kernel.removesuffix("_tl")


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def summary_line(o: Outcome) -> str:
    worst = f"worst {o.worst:.2e}" + (f" ({o.worst_case})" if o.worst_case else "")
    extra = f"; {o.errors[0][:200]}" if o.errors else ""
    return f"{o.kernel:>13} {o.backend:>8} {o.part:>6} {o.dtype:>8}: {o.status} {o.cases} cases, {worst} in {o.seconds:.1f}s{extra}"


def error_cell(o: Outcome | None) -> str:
    if o is None:
        return ""
    if o.status in ("unavailable", "not exported"):
        return o.status
    if o.status == "FAIL":
        return f"**FAIL** ({len(o.errors)} of {o.cases + len(o.errors)})"
    return f"{o.worst:.1e}" + (f" ({o.worst_case})" if o.worst_case else "")


def render_markdown(checker: Checker, environment: dict[str, Any], elapsed: float, tokens: list[int],
                    view_tokens: list[int]) -> str:
    from lazyops.testing import TOLERANCE

    outcomes = checker.outcomes
    versions = ", ".join(f"{name} {version}" for name, version in environment["versions"].items())
    tolerances = ", ".join(f"{dtype_name(d)} {t:.0e}" for d, t in TOLERANCE.items())
    lines = [
        "# Kernel conformance on a GPU",
        "",
        f"Generated by `{environment['command']}`; do not edit.",
        *[f"Backends kept from `{command}` (--merge)." for command in environment.get("earlier_commands", [])],
        "",
        f"- date: {environment['date']}",
        f"- device: {environment['device']}",
        f"- versions: {versions}; Python {environment['python']}; lazyops at {environment['commit']}",
        f"- backends: {', '.join(f'{k} ({v})' for k, v in environment['backends'].items())}",
        f"- wall time: {elapsed:.0f} s",
        "",
        ("Judged by the conformance kit (`lazyops.testing`): relative error ‖out − ref‖ / ‖ref‖ against the spec's "
        f"reference in float64, tolerance per dtype ({tolerances}), each error beside the tolerance of the dtype it "
        "was judged in (the fp8 norms' output in float8); in-place results also element by element; "
        "outputs allocated over freed NaN-filled blocks, so an element never written fails. **grid**: the spec's "
        f"engine-sized configuration (`spec.benchmark`) at M = {', '.join(map(str, tokens))}. **views**: the same "
        f"at M = {', '.join(map(str, view_tokens)) or '—'}, every input a contiguous view one element into its "
        f"allocation. **drawn**: `run_conformance`, up to {environment['max_examples']} hypothesis examples per "
        f"kernel (seed {environment['seed']}), every dtype; its worst error is reported with the dtype it was seen in."),
        "",
        "| kernel | backend | dtype | result | grid: worst rel. error (tolerance) | views | cases |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    by_key = {(o.backend, o.kernel, o.part, o.dtype): o for o in outcomes}
    grids = [o for o in outcomes if o.part == "grid"]
    for o in grids:
        views = by_key.get((o.backend, o.kernel, "views", o.dtype))
        failed = o.status == "FAIL" or (views is not None and views.status == "FAIL")
        result = "**FAIL**" if failed else o.status
        cases = o.cases + (views.cases if views else 0)
        tolerance = f" ({o.tolerance:.0e})" if o.tolerance else ""
        lines.append(f"| {o.kernel} | {o.backend} | {o.dtype} | {result} | {error_cell(o)}{tolerance} | "
                     f"{error_cell(views)} | {cases} |")
    for o in (o for o in outcomes if o.part == "all"):
        lines.append(f"| {o.kernel} | {o.backend} | — | unavailable | | | 0 |")
    drawn = [o for o in outcomes if o.part == "drawn"]
    if drawn:
        lines += ["", "## Drawn examples (hypothesis, `run_conformance`)", "",
                  "| kernel | backend | result | examples | worst rel. error (dtype, tolerance) |",
                  "| --- | --- | --- | --- | --- |"]
        for o in drawn:
            worst = f"{o.worst:.1e} ({o.dtype}, {o.tolerance:.0e})" if o.tolerance else "—"
            lines.append(f"| {o.kernel} | {o.backend} | {'**FAIL**' if o.status == 'FAIL' else o.status} | "
                         f"{o.cases} | {worst} |")
    problems = [(o, error) for o in outcomes for error in o.errors if o.status != "unavailable"]
    unavailable = {o.backend: o.errors[0] for o in outcomes if o.status == "unavailable"}
    if problems or unavailable:
        lines += ["", "## Errors", ""]
        lines += [f"- {backend}: unavailable: {reason}" for backend, reason in unavailable.items()]
        for o, error in problems:
            text = error.replace("\n", "\n  ")
            lines.append(f"- {o.kernel} {o.backend} {o.part} {o.dtype}: {text}")
    return "\n".join(lines) + "\n"


def write_results(out: Path, checker: Checker, environment: dict[str, Any], elapsed: float, tokens: list[int],
                  view_tokens: list[int]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_conformance.md").write_text(render_markdown(checker, environment, elapsed, tokens, view_tokens))
    payload = {
        "environment": environment,
        "elapsed_s": round(elapsed, 1),
        "summary": [asdict(o) for o in checker.outcomes],
        "cases": checker.cases,
    }
    (out / "gpu_conformance.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
