"""lazyops doctor: what runs here, and is it right.

Reports the Python, torch, Triton and TileLang versions and the device; each backend (whether it loads and can
run here, its import time, and if not why, with the way out); the configuration read from the environment, each
problem with its fix; and each kernel: where it resolves now, and in every backend that can run here, checked
against the float64 reference (lazyops.testing.check_case, the judge of the conformance suite) on a few cases
that tell a right kernel from a nearly right one: its benchmark configuration cut to 256 features at M = 1 and 7
in --dtype and in float32 (whose tolerance no systematic error passes), a norm's eps of the order of its rows'
mean square (where forgetting it shows), and 3 cases drawn from its spec, the same on every run. The conformance kit
(lazyops.testing.run_conformance) draws many more.

Exit status: 0 when everything selected works and every check passes; 1 when a selected backend cannot run, a
kernel cannot be resolved, a check fails, or a LAZYOPS_* variable is not one lazyops reads (misspelt: what it
meant to set is not set); 2 when the configuration is wrong (the problems say how to fix it).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lazyops import _settings
from lazyops.cli._errors import FOUND_PROBLEMS, OK, USAGE
from lazyops.cli._status import BROKEN, RUNS, BackendStatus, one_line

HELP = "versions, device, backends, configuration, and every kernel checked against float64"

#: The variables the configuration table shows: lazyops' own (``_settings.VARIABLES``, its one table, with their
#: meanings) and Triton's switch to its interpreter, which decides whether that backend runs on a CPU.
VARIABLES = {
    **{name: meaning for name, meaning in _settings.VARIABLES.items() if name not in ("RANK", "LOCAL_RANK")},
    "TRITON_INTERPRET": "Triton on the CPU (Triton's own variable)",
}
#: The check's token counts: one token (the decode step) and a few rows, so both paths of a kernel run.
TOKENS = (1, 7)
#: Feature sizes of the check are the benchmark's, cut to this: enough for several blocks, fast on a CPU.
SMALL = 256
#: A norm's eps of the order of its rows' mean square (the kit's inputs are unit normal): forgetting it shows.
LARGE_EPS = 0.5
#: Cases drawn from each kernel's spec, beside the fixed ones.
DRAWN = 3
#: The most elements one input of a case may hold: drawn widths reach 20000, and Triton may run interpreted.
MAX_ELEMENTS = 32768

PASS, FAIL, ERROR, NO_SPEC = "pass", "FAIL", "error", "no spec"
#: every case checked was declined by the backend's ``supports`` hook: a resolution, not a failure (issue 33.10)
DECLINES = "declines"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        metavar="NAME[,NAME]",
        help="check the kernels of these backends only (default: every backend that can run here)",
    )
    parser.add_argument(
        "--dtype", default="bfloat16", choices=("float32", "float16", "bfloat16"), help="the checks' dtype"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


@dataclass
class BackendFinding:
    name: str
    origin: str
    status: str
    selected: bool
    import_s: float | None = None
    reason: str | None = None
    #: the backend's factories, imported (what the checks run)
    factories: dict[str, Any] = field(default_factory=dict, repr=False)
    #: kernels whose module could not be imported, with why
    kernel_errors: dict[str, str] = field(default_factory=dict)


@dataclass
class Check:
    status: str
    #: the relative error of the first case (the benchmark configuration in the dtype asked for)
    error: float | None = None
    message: str = ""
    #: how many cases the check runs (see :func:`cases`)
    cases: int = 0


@dataclass
class KernelFinding:
    kernel: str
    backend: str | None = None
    reason: str | None = None
    problem: str | None = None
    #: the backend it resolves to when that backend cannot serve it (the problem is the backend's, reported once)
    blocked_by: str | None = None
    checks: dict[str, Check] = field(default_factory=dict)


def main(args: argparse.Namespace) -> int:
    from lazyops.cli._output import Output

    output = Output()
    report = diagnose(args, output)
    if args.json:
        output.json(report.as_json())
    else:
        report.render(output)
    return report.exit_status


class Diagnosis:
    def __init__(self) -> None:
        self.versions: dict[str, str | None] = {}
        self.device = ""
        self.variables: dict[str, str | None] = {}
        self.config_problems: list[str] = []
        #: LAZYOPS_* variables lazyops does not read (misspelt, most likely): each one a failure
        self.config_warnings: list[str] = []
        self.chain: tuple[str, ...] = ()
        self.strict = False
        self.default = ""
        self.backends: list[BackendFinding] = []
        self.kernels: list[KernelFinding] = []
        self.dtype = ""
        #: the plan LAZYOPS_PLAN names: its path, entries, and whether it applies here (None: no plan)
        self.plan: str | None = None

    # -- the verdict -------------------------------------------------------------------------------------------
    def failures(self) -> list[str]:
        """What makes the exit status 1, one line each: a backend that cannot serve the kernels resolving to it is
        one line (with how many), not one per kernel."""
        from lazyops.cli._output import count

        blocked: dict[str, list[str]] = {}
        for kernel in self.kernels:
            if kernel.blocked_by and not self.config_problems:
                blocked.setdefault(kernel.blocked_by, []).append(kernel.kernel)
        found = []
        for b in self.backends:
            if not (b.selected and b.status != RUNS) and b.name not in blocked:
                continue
            served = blocked.get(b.name, [])
            resolving = f"{count(len(served), 'kernel')} resolve to it"
            if len(served) == 1:
                resolving = f"{served[0]} resolves to it"
            elif len(served) == len(self.kernels):
                resolving = "every kernel resolves to it"
            status = BackendStatus(b.name, b.status, b.reason)
            found.append(f"{'selected ' if b.selected else ''}{status.sentence()} ({resolving})")
        for kernel in self.kernels:
            if kernel.problem and not kernel.blocked_by and not self.config_problems:
                found.append(f"{kernel.kernel}: {kernel.problem}")
            found += [
                f"{kernel.kernel} in {backend}: {check.message}"
                for backend, check in kernel.checks.items()
                if check.status in (FAIL, ERROR)
            ]
        # A misspelt variable leaves what it meant to set unset: whatever runs, it is not what was asked for.
        return found + self.config_warnings

    @property
    def exit_status(self) -> int:
        if self.config_problems:
            return USAGE
        return FOUND_PROBLEMS if self.failures() else OK

    # -- output ------------------------------------------------------------------------------------------------
    def as_json(self) -> dict[str, Any]:
        return {
            "versions": self.versions,
            "device": self.device,
            "configuration": {
                "variables": self.variables,
                "chain": list(self.chain),
                "strict": self.strict,
                "platform_default": self.default,
                "problems": self.config_problems,
                "warnings": self.config_warnings,
                "plan": self.plan,
            },
            "backends": [
                {
                    "name": b.name,
                    "origin": b.origin,
                    "status": b.status,
                    "selected": b.selected,
                    "import_s": None if b.import_s is None else round(b.import_s, 4),
                    "reason": b.reason,
                }
                for b in self.backends
            ],
            "dtype": self.dtype,
            "kernels": [
                {
                    "kernel": k.kernel,
                    "resolves_to": k.backend,
                    "reason": k.reason,
                    "problem": k.problem,
                    "checks": {
                        name: {"status": c.status, "error": c.error, "message": c.message, "cases": c.cases}
                        for name, c in k.checks.items()
                    },
                }
                for k in self.kernels
            ],
            "failures": self.failures(),
            "exit_status": self.exit_status,
        }

    def render(self, out: Any) -> None:
        from lazyops.cli._output import count, seconds

        out.line(("lazyops doctor", "head"))
        names = {"python": "Python", "lazyops": "lazyops", "torch": "torch", "triton": "Triton", "tilelang": "TileLang"}
        for key, label in names.items():
            version = self.versions.get(key)
            out.line(f"  {label:<9} ", (version, "") if version else ("not installed", "dim"))
        out.line(f"  {'device':<9} {self.device}")

        out.heading("Backends")
        rows = []
        for b in self.backends:
            status = (b.status, "ok" if b.status == RUNS else ("fail" if b.selected else "warn"))
            name = b.name + (" *" if b.selected else "")
            rows.append([name, status, seconds(b.import_s), b.reason or ""])
        out.table(
            ["backend", "status", "import", "why not, and the way out"], rows, no_wrap=("backend", "status", "import")
        )
        out.line(("* selected. import: the backend and its kernel modules (torch already loaded)", "dim"))

        out.heading("Configuration")
        settings: list[list[Any]] = [
            [name, _shown(self.variables.get(name)), meaning] for name, meaning in VARIABLES.items()
        ]
        settings += [
            [name, _shown(value), ("not a lazyops variable", "warn")]
            for name, value in self.variables.items()
            if name not in VARIABLES
        ]
        out.table(["variable", "value", "meaning"], settings, no_wrap=("variable",))
        if self.chain:
            default = (
                " (the platform default)" if self.chain == (self.default,) else f"; platform default: {self.default}"
            )
            out.line(f"  chain: {','.join(self.chain)}{default}", "; strict" if self.strict else "")
        if self.plan is not None:
            out.line("  plan: ", self.plan)
        for problem in self.config_problems:
            out.line(("  problem: ", "fail"), problem)
        for warning in self.config_warnings:
            out.line(("  problem: ", "fail"), warning)
        if not self.config_problems and not self.config_warnings:
            out.line(("  no problems", "ok"))

        tokens = ", ".join(map(str, TOKENS))
        out.heading(f"Kernels (each on its benchmark configuration at M = {tokens}, {self.dtype}, and more)")
        checked = [b.name for b in self.backends if any(b.name in k.checks for k in self.kernels)]
        rows = []
        for k in self.kernels:
            where = (f"{k.backend} ({k.reason})", "") if k.backend and not k.problem else ("unavailable", "fail")
            if self.config_problems:
                where = ("not read", "fail")
            if k.backend and k.problem:
                where = (f"{k.backend}: fails", "fail")
            cells = [_check_cell(k.checks.get(name)) for name in checked]
            rows.append([k.kernel, where, *cells])
        out.table(["kernel", "resolves to", *checked], rows, no_wrap=("kernel",))
        out.line(
            (
                f"pass: every case within its dtype's tolerance of float64 (shown: ‖out − ref‖/‖ref‖ at M = {tokens},"
                f" {self.dtype}); also checked: float32, eps={LARGE_EPS} where the kernel takes it, {DRAWN} cases "
                "drawn from its spec",
                "dim",
            )
        )

        failures = self.failures()
        for line in failures:
            out.line(("  FAIL ", "fail"), line)
        out.console.print()
        passed = sum(c.status == PASS for k in self.kernels for c in k.checks.values())
        total = sum(c.status not in (NO_SPEC, DECLINES) for k in self.kernels for c in k.checks.values())
        if self.exit_status == USAGE:
            out.line(("configuration error: ", "fail"), "fix the problems above (exit status 2)")
        elif failures:
            problems = count(len(failures), "problem")
            out.line((f"{problems}; ", "fail"), f"{passed} of {count(total, 'check')} passed (exit status 1)")
        else:
            out.line(("all good: ", "ok"), f"{passed} of {count(total, 'check')} passed")


def _shown(value: str | None) -> Any:
    if value is None:
        return ("(unset)", "dim")
    return value if value.strip() else (repr(value), "dim")


def _check_cell(check: Check | None) -> Any:
    if check is None:
        return ("-", "dim")
    if check.status == PASS:
        return (f"pass {check.error:.1e}" if check.error else "pass 0", "ok")
    if check.status in (NO_SPEC, DECLINES):
        return (check.status, "dim")
    return (check.status, "fail")


# -- gathering ---------------------------------------------------------------------------------------------------


def diagnose(args: argparse.Namespace, out: Any) -> Diagnosis:
    import lazyops
    from lazyops import _api

    report = Diagnosis()
    report.dtype = args.dtype
    report.versions = versions()
    try:
        names = lazyops.backends()
        report.default = _api.default_backend()
    except lazyops.BackendError as error:  # a bad entry point: nothing can be listed until it is fixed
        report.config_problems.append(str(error))
        return report
    wanted = _wanted_backends(args.backend, names)
    read_configuration(report)
    from lazyops._plan import plan_status

    report.plan = plan_status(_api.backend_origins())
    if report.plan is not None and report.plan.startswith("cannot be used: "):
        report.config_problems.append(f"LAZYOPS_PLAN: {report.plan}")  # every kernel access raises it (33.9)
    report.device = device()
    if not report.chain and not report.config_problems:
        report.chain = (report.default,)
    for name in names:
        report.backends.append(load_backend(_api.backend(name), selected=name in report.chain))
    runnable = {b.name: b for b in report.backends if b.status == RUNS and b.name in wanted}
    kernels = lazyops.kernels()
    work = [(k, b) for k in kernels for b in runnable.values() if k in b.factories]
    with out.progress(len(work), "checking kernels") as progress:
        for kernel in kernels:
            entry = resolve_kernel(kernel, report)
            for loaded in runnable.values():
                if kernel in loaded.kernel_errors:
                    entry.checks[loaded.name] = Check(ERROR, message=loaded.kernel_errors[kernel])
                elif kernel in loaded.factories:
                    progress.working_on(f"{kernel} in {loaded.name}")
                    entry.checks[loaded.name] = check_kernel(kernel, loaded, args.dtype)
                    progress.advance()
            report.kernels.append(entry)
    return report


def _wanted_backends(option: str | None, known: tuple[str, ...]) -> set[str]:
    if not option:
        return set(known)
    from lazyops.cli._errors import unknown_names

    names = {name.strip() for name in option.split(",") if name.strip()}
    if not names <= set(known):
        raise unknown_names("--backend", "backend", names, known)
    return names


def versions() -> dict[str, str | None]:
    from importlib import metadata

    found: dict[str, str | None] = {"python": platform.python_version()}
    for package in ("lazyops", "torch", "triton", "tilelang"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    if found["lazyops"] is None:  # run from a source tree without installing it
        import lazyops

        found["lazyops"] = lazyops.__version__
    return found


def device() -> str:
    import torch

    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        count = torch.cuda.device_count()
        more = f" (1 of {count})" if count > 1 else ""
        return f"{torch.cuda.get_device_name(index)}, CUDA capability {major}.{minor}{more}"
    return f"CPU only ({platform.machine()}, {os.cpu_count()} cores; torch sees no CUDA device)"


def read_configuration(report: Diagnosis) -> None:
    """The variables as set, each malformed one as a problem (all of them, not just the first), then the whole."""
    from lazyops import _api
    from lazyops._errors import ConfigError

    environ = os.environ
    report.variables = {name: environ.get(name) for name in VARIABLES}
    for name, nearest in _settings.unknown_variables(environ):
        report.variables[name] = environ[name]
        hint = f"; did you mean {nearest}?" if nearest else ""
        report.config_warnings.append(f"{name} is not a lazyops variable and is ignored{hint}")

    parsers: dict[str, Callable[[str], object]] = {
        "LAZYOPS_BACKEND": lambda value: _settings.parse_chain("LAZYOPS_BACKEND", value),
        "LAZYOPS_FALLBACK": lambda value: _settings.parse_fallback("LAZYOPS_FALLBACK", value),
        "LAZYOPS_TRACE": lambda value: _settings.settings_from_environment({"LAZYOPS_TRACE": value}),
        **{
            name: functools.partial(_settings.parse_bool, name)
            for name in ("LAZYOPS_STRICT", "LAZYOPS_VERBOSE", "LAZYOPS_TRACE_ARGS")
        },
    }
    for name, parse in parsers.items():
        if environ.get(name) is not None:
            try:
                parse(environ[name])
            except ConfigError as error:
                report.config_problems.append(str(error))
    try:
        _settings.parse_rank(environ)
    except ConfigError as error:
        report.config_problems.append(str(error))
    try:
        settings = _api.settings()
    except ConfigError as error:
        _add_problem(report, error)
        _check_chain_alone(report, environ.get("LAZYOPS_BACKEND"))
        return
    except ImportError as error:  # a bad entry point, found while validating: reported with the backends
        report.config_problems.append(str(error))
        return
    report.chain = settings.chain or ()
    report.strict = settings.strict


def _add_problem(report: Diagnosis, error: Exception) -> None:
    if str(error) not in report.config_problems:
        report.config_problems.append(str(error))


def _check_chain_alone(report: Diagnosis, value: str | None) -> None:
    """The backend names, validated even when another variable is malformed (settings stop at the first)."""
    from lazyops import _api
    from lazyops._errors import ConfigError

    try:
        chain = _settings.parse_chain("LAZYOPS_BACKEND", value)
        _api.check(_settings.Settings(chain=chain))
    except (ConfigError, ImportError) as error:
        _add_problem(report, error)


def load_backend(backend: Any, *, selected: bool) -> BackendFinding:
    """Load ``backend`` and import every kernel module it declares, timed; or say why it cannot run here."""
    from lazyops.cli._status import backend_status

    started = time.perf_counter()
    status = backend_status(backend.name)
    entry = BackendFinding(backend.name, backend.origin, status.status, selected, reason=status.reason)
    if not status.runs:
        # Not imported further: a backend that cannot run here would only cost its import time (TileLang: seconds).
        return entry
    exports = backend.exports()
    for kernel in sorted(exports):
        try:
            entry.factories[kernel] = backend.kernel(kernel)
        except Exception as error:  # noqa: BLE001 - one kernel module that fails to import is that kernel's failure
            entry.kernel_errors[kernel] = one_line(error)
    entry.import_s = time.perf_counter() - started
    if exports and not entry.factories:
        entry.status, entry.reason = BROKEN, next(iter(entry.kernel_errors.values()))
    return entry


def resolve_kernel(kernel: str, report: Diagnosis) -> KernelFinding:
    """Where ``kernel`` resolves now, and whether that source works: the resolution path without the notices."""
    entry = KernelFinding(kernel)
    if report.config_problems:
        entry.problem = "not resolved: the configuration is wrong"
        return entry
    try:
        import lazyops

        resolution = lazyops.which(kernel)
    except Exception as error:  # noqa: BLE001 - whatever resolution raises is this kernel's problem, reported
        entry.problem = one_line(error)
        return entry
    entry.backend, entry.reason = resolution.backend, resolution.reason
    source = next(b for b in report.backends if b.name == resolution.backend)
    if source.status != RUNS:
        entry.blocked_by = source.name
        entry.problem = BackendStatus(source.name, source.status, source.reason).sentence()
    elif kernel in source.kernel_errors:
        entry.problem = source.kernel_errors[kernel]
    return entry


def cases(kernel: str, dtype: str, factory: Any) -> list[tuple[str, Any]]:
    """The cases a kernel is checked on, each named by what it is for, the cheapest first.

    One small case alone passes kernels that are wrong: without ``eps`` an rmsnorm is off by about ``eps / 2``
    relative, invisible next to a 16-bit tolerance; scaled by 1.01 it is within bfloat16's 8e-3 on some inputs.
    So beside the benchmark configuration in the dtype asked for: the same in float32, whose tolerance (1e-5) no
    systematic error passes; ``eps`` of the order of the rows' mean square (the inputs are unit normal), where
    forgetting it changes every output by almost a fifth; and a few cases drawn from the spec's own strategy
    (widths that cross block boundaries, the norms' options, zero tokens), the same on every run.
    """
    import dataclasses
    import inspect

    first = small_case(kernel, dtype)
    found = [(f"{dtype} at M = {', '.join(map(str, TOKENS))}", first)]
    if dtype != "float32":
        found.append(("float32", small_case(kernel, "float32")))
    if "eps" in inspect.signature(factory).parameters:
        found.append((f"eps={LARGE_EPS}", dataclasses.replace(first, kwargs={**first.kwargs, "eps": LARGE_EPS})))
    found += [(f"drawn case {index}", case) for index, case in enumerate(drawn_cases(kernel, DRAWN), 1)]
    return found


def small_case(kernel: str, dtype: str) -> Any:
    """The kernel's benchmark configuration with every size cut to :data:`SMALL`: a deterministic small example."""
    import torch

    from lazyops.specs import spec
    from lazyops.testing import Case
    from lazyops.testing.cases import examples

    example = examples(spec(kernel)).benchmark(getattr(torch, dtype))
    return Case(
        kernel,
        tuple(_small(arg) for arg in example.args),
        dict(example.kwargs),
        tokens=TOKENS,
        seed=0,
        geometry={key: _small(value) for key, value in example.geometry.items()},
    )


def _small(value: Any) -> Any:
    return min(value, SMALL) if isinstance(value, int) and not isinstance(value, bool) else value


def drawn_cases(kernel: str, count: int) -> list[Any]:
    """``count`` cases from the spec's hypothesis strategy, derandomised: the same cases on every run and machine,
    so that doctor's verdict never changes from one run to the next."""
    import tempfile

    import hypothesis
    from hypothesis.configuration import set_hypothesis_home_dir

    from lazyops.specs import spec
    from lazyops.testing.cases import examples

    found: list[Any] = []

    @hypothesis.settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
        deadline=None,
    )
    @hypothesis.given(examples(spec(kernel)).cases())
    def collect(case: Any) -> None:
        found.append(case)

    # hypothesis keeps its caches in ./.hypothesis: doctor runs anywhere, so they go to a folder it removes (33)
    with tempfile.TemporaryDirectory(prefix="lazyops-doctor-") as home:
        set_hypothesis_home_dir(home)
        try:
            collect()
        finally:
            set_hypothesis_home_dir(None)  # back to HYPOTHESIS_STORAGE_DIRECTORY or ./.hypothesis
    return found[:count]


def check_kernel(kernel: str, backend: BackendFinding, dtype: str) -> Check:
    """Every case of :func:`cases` through ``lazyops.testing.check_case``; the first that fails is the verdict."""
    from lazyops.specs import has_spec, spec
    from lazyops.testing import check_case, default_device

    if not has_spec(kernel):
        return Check(NO_SPEC, message="lazyops specifies no such kernel, so it has no reference to check against")
    factory = backend.factories[kernel]
    device = default_device(backend.name)
    shown: float | None = None
    checked = cases(kernel, dtype, factory)
    supports = getattr(factory, "lazyops_supports", None)
    declined = ""
    for what, case in checked:
        if supports is not None:  # a case the backend declines comes from the next backend: not this check's
            try:
                declined = supports(spec(kernel).bind(*case.args, **case.kwargs)) or ""
            except Exception:  # noqa: BLE001 - a configuration its spec refuses: check_case says so below
                declined = ""
            if declined:
                continue
        try:
            import torch

            with torch.inference_mode():
                error = check_case(factory, case, device=device, max_elements=MAX_ELEMENTS)
        except AssertionError as failure:
            rerun = f"rerun: lazyops.testing.check_case(factory, {case!r})"
            return Check(FAIL, message=f"{what}: {one_line(failure)} ({rerun})", cases=len(checked))
        except Exception as failure:  # noqa: BLE001 - a kernel that raises is a failed check, not a crashed doctor
            return Check(ERROR, message=f"{what}: {type(failure).__name__}: {one_line(failure)}", cases=len(checked))
        shown = error if shown is None else shown
    if shown is None and declined:
        return Check(DECLINES, message=f"declines every case checked: {declined}", cases=len(checked))
    return Check(PASS, error=shown, cases=len(checked))
