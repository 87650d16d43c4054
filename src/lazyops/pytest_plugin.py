"""The pytest plugin: a test that needs a kernel the selected backend lacks is skipped, not failed.

People porting kernels run their engine's test suite on a half-finished backend. With strict mode (or the
``lazyops_backend`` fixture), a kernel the backend lacks raises ``KernelUnavailableError``; wherever that escapes
(a test, a fixture, the import of a test module) this plugin reports a skip whose reason names the kernel, the
backend and where the kernel is available, so the run reads as a to-do list instead of a wall of tracebacks. When
the port is meant to be complete, ``--lazyops-fail-missing`` (or ``lazyops_fail_missing = true`` in the ini file)
turns those skips back into failures. Any other ``AttributeError`` stays a failure: only the one error that means
"not ported yet" is forgiven.

Registered through the ``pytest11`` entry point, so it is active in every pytest session of every project that
has lazyops installed; ``-p no:lazyops`` turns it off. That is why loading it imports nothing but lazyops' light
top level: the backends, torch and the kernel modules are reached only by the hooks that need them, and only
``pytest_report_header`` (one line) and the ``lazyops_backend`` parametrization ask lazyops anything at all.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any

import pytest

import lazyops
from lazyops import _api
from lazyops._errors import KernelUnavailableError, LazyopsError
from lazyops._resolve import FALLBACK_LIST, INHERITED

if TYPE_CHECKING:
    from lazyops._sources import Sources

FIXTURE = "lazyops_backend"
MARKER = "requires_kernels"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(lazyops.__file__)) + os.sep  # frames inside it are lazyops'

#: what pytest_configure set up (the session's configuration, the environment), undone at unconfigure
_SESSION = pytest.StashKey[contextlib.ExitStack]()
#: ``{backend: why it cannot run here, or None}``, asked once per session
_RUNNABLE = pytest.StashKey[dict[str, "str | None"]]()


class RequiredKernelsMissing(Exception):
    """Raised by the ``requires_kernels`` marker's check; reported like an escaped ``KernelUnavailableError``."""

    def __init__(self, errors: list[KernelUnavailableError]) -> None:
        super().__init__(missing_reason(errors))
        self.errors = errors


# -- options, marker, session configuration ------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lazyops", "lazyops kernel backends")
    group.addoption(
        "--lazyops-backend",
        metavar="NAME[,NAME]",
        default=None,
        help="select the lazyops backend (or priority chain) for this session, as LAZYOPS_BACKEND does; the "
        "lazyops_backend fixture then runs only over these backends",
    )
    group.addoption(
        "--lazyops-strict",
        action="store_true",
        default=False,
        help="no fallback of any kind (LAZYOPS_STRICT=1): a kernel the selected backend lacks raises, and the "
        "test that needs it is skipped",
    )
    group.addoption(
        "--lazyops-fail-missing",
        action="store_true",
        default=None,
        help="a test that needs a kernel the backend lacks fails instead of being skipped (for a port meant to "
        "be complete)",
    )
    parser.addini(
        "lazyops_fail_missing",
        type="bool",
        default=False,
        help="like --lazyops-fail-missing: a missing kernel is a failure, not a skip",
    )


def fail_missing(config: pytest.Config) -> bool:
    option = config.getoption("lazyops_fail_missing")
    return bool(option) if option is not None else bool(config.getini("lazyops_fail_missing"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*kernels): skip the test before its fixtures run when lazyops cannot supply one of these "
        "kernels (under --lazyops-fail-missing: fail it)",
    )
    stack = contextlib.ExitStack()
    config.stash[_SESSION] = stack
    backend = config.getoption("lazyops_backend")
    strict = config.getoption("lazyops_strict")
    if backend is None and not strict:
        return
    overrides: dict[str, Any] = {}
    if backend is not None:
        overrides["backend"] = _parse_backend_option(backend)
    if strict:
        overrides["strict"] = True
    try:
        stack.enter_context(_api.configured(**overrides))
    except LazyopsError as error:
        raise pytest.UsageError(f"lazyops: {_option_words(backend, strict)}: {error}") from None
    # Subprocesses the tests start (an engine's workers) must see the same selection as this process.
    environment = stack.enter_context(pytest.MonkeyPatch.context())
    if backend is not None:
        environment.setenv("LAZYOPS_BACKEND", ",".join(overrides["backend"]))
    if strict:
        environment.setenv("LAZYOPS_STRICT", "1")


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_SESSION, None)
    if stack is not None:
        stack.close()


def _parse_backend_option(value: str) -> tuple[str, ...]:
    """``--lazyops-backend``'s comma list, checked against the registered names with the choices in the error."""
    names = [name.strip() for name in value.split(",")]
    try:
        known = lazyops.backends()
    except LazyopsError as error:  # a malformed entry point: nothing can be selected until it is fixed
        raise pytest.UsageError(f"lazyops: --lazyops-backend={value}: {error}") from None
    if not all(names):
        raise pytest.UsageError(f"--lazyops-backend={value!r} has an empty entry; choose from: {', '.join(known)}")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise pytest.UsageError(
            f"--lazyops-backend={value}: {', '.join(map(repr, unknown))} "
            f"{'is not a registered backend' if len(unknown) == 1 else 'are not registered backends'}; "
            f"choose from: {', '.join(known)} (third-party backends register through the 'lazyops.backends' "
            "entry-point group)"
        )
    return tuple(names)


def _option_words(backend: str | None, strict: bool) -> str:
    words = [f"--lazyops-backend={backend}"] if backend is not None else []
    return " ".join(words + (["--lazyops-strict"] if strict else []))


# -- the header ----------------------------------------------------------------------------------------------
def pytest_report_header(config: pytest.Config) -> list[str]:
    """One line: the backend in force and how many kernels come from it, from the fallback, from nowhere.

    Computed from ``lazyops._api.sources()`` (names and stubs only, no kernel module is imported). A configuration
    mistake, or what ``EAGER_IMPORT=1`` failed on, is printed here rather than raised: the header is the first
    place a user looks, and a crash there would hide every test result (of projects that do not even use lazyops).
    """
    lines = []
    eager = _api.eager_error()
    if eager is not None:
        lines.append(
            f"lazyops: EAGER_IMPORT: resolving every kernel at import failed: {type(eager).__name__}: {eager}; "
            "tests that use lazyops' kernels fail with it"
        )
    try:
        lines += header_lines(config)
    except LazyopsError as error:
        if eager is None or str(error) != str(eager):
            lines.append(f"lazyops: {error}")
    return lines


def header_lines(config: pytest.Config) -> list[str]:
    sources = _api.sources()
    selected: dict[str, int] = {}
    elsewhere: dict[str, list[str]] = {}  # "inherited from torch": [kernels]
    missing: list[str] = []
    for source in sources.kernels:
        if source.backend is None:
            missing.append(source.kernel)
        elif source.reason == INHERITED:
            elsewhere.setdefault(f"inherited from {source.backend}", []).append(source.kernel)
        elif source.reason == FALLBACK_LIST:
            elsewhere.setdefault(f"forced to {source.backend} by {sources.origin['fallback']}", []).append(
                source.kernel
            )
        else:
            selected[source.backend] = selected.get(source.backend, 0) + 1

    line = f"lazyops: backend {','.join(sources.chain)} ({_origin_words(config, sources)}) \N{EM DASH} "
    line += f"{sum(selected.values())} of {len(sources.kernels)} kernels from {','.join(sources.chain)}"
    if len(sources.chain) > 1 and selected:
        line += f" ({', '.join(f'{selected[backend]} {backend}' for backend in sources.chain if backend in selected)})"
    line += "".join(f", {len(found)} {where}" for where, found in elsewhere.items())
    if missing:
        line += f", {len(missing)} missing (tests that need them {'fail' if fail_missing(config) else 'skip'})"
    lines = [line]
    if config.getoption("verbose") > 0 and (elsewhere or missing):
        parts = [f"{where}: {', '.join(found)}" for where, found in elsewhere.items()]
        parts += [f"missing: {', '.join(missing)}"] if missing else []
        lines.append(f"lazyops: {'; '.join(parts)}")
    if not sources.chain_is_default:
        # Selected by hand, so it may not suit this machine: say so now, not at the first kernel.
        lines += [f"lazyops: {reason}" for backend in sources.chain if (reason := _api.unavailable_reason(backend))]
    lines += [f"lazyops: {refusal}" for refusal in sources.refused]
    return lines


def _origin_words(config: pytest.Config, sources: Sources) -> str:
    if sources.chain_is_default:
        origin = "platform default"
    elif config.getoption("lazyops_backend") is not None:
        origin = "--lazyops-backend"
    else:
        origin = sources.origin["backend"]
    return origin + (", strict" if sources.strict else "")


# -- the lazyops_backend fixture -----------------------------------------------------------------------------
@pytest.fixture
def lazyops_backend(request: pytest.FixtureRequest) -> Generator[str, None, None]:
    """Each backend that can run here, by name, selected alone and strict for the test's duration.

    Parametrized at collection over every registered backend, or over the session's selection (the
    ``--lazyops-backend`` option or ``LAZYOPS_BACKEND``) when there is one, so a conformance test is written once.
    Strict is the point: a kernel the backend lacks raises ``KernelUnavailableError`` and the test is skipped, where
    it would otherwise quietly run the fallback's kernel under the backend's name. A backend that cannot run here
    stays in the list as a skipped parameter whose reason says why. The configuration before the test is restored
    after it.
    """
    name = getattr(request, "param", None)
    if name is None:
        pytest.fail(
            f"the {FIXTURE} fixture is parametrized at collection: request it as an argument of the test or of "
            "one of its fixtures, not through request.getfixturevalue()",
            pytrace=False,
        )
    reason = runnable(request.config).get(name)
    if reason:  # a parameter given by hand (pytest_generate_tests marks its own as skipped)
        pytest.skip(reason)
    with _api.configured(backend=name, strict=True, fallback=None):
        yield name


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if FIXTURE not in metafunc.fixturenames or _parametrized_by_hand(metafunc):
        return
    reasons = runnable(metafunc.config)
    params = [
        # A skip mark rather than leaving the backend out: the run then says which backends were not checked and
        # why, and -rs folds these skips into one line per file and backend.
        pytest.param(name, id=name, marks=[pytest.mark.skip(reason=reason)] if (reason := reasons.get(name)) else [])
        for name in _fixture_backends(metafunc.config)
    ]
    metafunc.parametrize(FIXTURE, params, indirect=True)


def _parametrized_by_hand(metafunc: pytest.Metafunc) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(argnames, str):
            argnames = [name.strip() for name in argnames.split(",")]
        if FIXTURE in argnames:
            return True
    return False


def _fixture_backends(config: pytest.Config) -> list[str]:
    settings = _api.settings()
    if settings.chain is not None:
        return list(settings.chain)
    return list(lazyops.backends())


def runnable(config: pytest.Config) -> dict[str, str | None]:
    """Why each registered backend cannot run here (``None``: it can); loads backend packages, not kernels."""
    if _RUNNABLE not in config.stash:
        config.stash[_RUNNABLE] = _api.backend_statuses()
    return config.stash[_RUNNABLE]


# -- the requires_kernels marker -----------------------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Check ``requires_kernels`` before any fixture is set up: they may be expensive (a model, a GPU context)."""
    kernels: list[str] = []
    for mark in item.iter_markers(MARKER):
        for kernel in mark.args:
            if not isinstance(kernel, str):
                pytest.fail(f"@pytest.mark.{MARKER} takes kernel names (strings), got {kernel!r}", pytrace=False)
            if kernel not in kernels:
                kernels.append(kernel)
    if not kernels:
        return
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get(FIXTURE) if callspec is not None else None
    if backend is not None and runnable(item.config).get(backend):
        return  # the fixture skips it, with the better reason
    errors = missing_kernels(kernels, backend)
    if errors:
        raise RequiredKernelsMissing(errors)


def missing_kernels(kernels: Iterable[str], backend: str | None) -> list[KernelUnavailableError]:
    """The ``KernelUnavailableError`` each access would raise, without resolving (or importing) anything.

    ``backend`` is a ``lazyops_backend`` parameter: the fixture will select it alone and strict, so that is the
    configuration to ask about, not the session's. An unknown name raises its plain ``AttributeError`` (a typo in
    a marker is a mistake to fix, not a kernel to port).
    """
    errors = []
    for kernel in kernels:
        try:
            if backend is None:
                lazyops.which(kernel)
            else:
                _api.resolve_alone(kernel, backend)
        except KernelUnavailableError as error:
            errors.append(error)
    return errors


# -- turning an escaped KernelUnavailableError into a skip ---------------------------------------------------
def missing_reason(errors: list[KernelUnavailableError]) -> str:
    """``lazyops: backend 'x' lacks kernel 'rope_tl' (available in: torch, triton)``, or, for a kernel the backends
    export but decline for the test's configuration, ``lazyops: backend 'tilelang' declines 'paged_attention_tl':
    head_dim 16: ...`` (saying it lacks a kernel it has would send the reader to port what exists)."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    declines: list[str] = []
    for error in errors:
        if error.declined:
            declines.extend(f"backend {backend!r} declines {error.kernel!r}: {why}" for backend, why in error.declined)
        else:
            groups.setdefault((error.backend, tuple(error.available_in)), []).append(repr(error.kernel))
    parts = [
        f"backend {backend!r} lacks kernel{'s' if len(kernels) > 1 else ''} {', '.join(kernels)} "
        f"(available in: {', '.join(available_in) or 'no loadable backend'})"
        for (backend, available_in), kernels in groups.items()
    ]
    return "lazyops: " + "; ".join(parts + declines)


def _unavailable(excinfo: pytest.ExceptionInfo[BaseException] | None) -> list[KernelUnavailableError]:
    if excinfo is None:
        return []
    if isinstance(excinfo.value, KernelUnavailableError):
        return [excinfo.value]
    if isinstance(excinfo.value, RequiredKernelsMissing):
        return excinfo.value.errors
    return []


def _where_accessed(excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[str, int] | None:
    """The innermost frame outside lazyops: the line that asked for the kernel (a test, a fixture, a module)."""
    for entry in reversed(excinfo.traceback):
        path = str(entry.path)
        if not path.startswith((_PACKAGE_DIR, "<")):
            return path, entry.lineno + 1
    return None


def _item_location(item: pytest.Item) -> tuple[str, int]:
    path, line, _ = item.reportinfo()
    return os.fspath(path), (line or 0) + 1


def _fail_note(errors: list[KernelUnavailableError]) -> str:
    return (
        f"{missing_reason(errors)}. This is a failure, not a skip, because of --lazyops-fail-missing "
        "(or lazyops_fail_missing = true in the ini file)"
    )


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # trylast makes this the innermost wrapper: the skip is decided before xfail handling looks at the report. The
    # traceback of a failure (--lazyops-fail-missing) ends at the line that asked for the kernel: lazyops' frames
    # on that path declare __tracebackhide__ for KernelUnavailableError (--fulltrace shows them).
    report = yield
    errors = _unavailable(call.excinfo) if call.when in ("setup", "call") else []
    if not errors or call.excinfo is None:  # (errors come from an excinfo)
        return report
    report.lazyops_missing = _missing_entries(errors)  # type: ignore[attr-defined]
    marker = isinstance(call.excinfo.value, RequiredKernelsMissing)
    if fail_missing(item.config):
        if marker:  # the plugin's own traceback would say nothing useful
            report.longrepr = f"{_fail_note(errors)}; required by @pytest.mark.{MARKER}"
        else:
            report.sections.append(("lazyops", _fail_note(errors)))
        return report
    location = None if marker else _where_accessed(call.excinfo)
    report.outcome = "skipped"
    report.longrepr = (*(location or _item_location(item)), missing_reason(errors))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A test module whose import asks for a missing kernel (``ROPE = lazyops.rope_tl``) is skipped as a whole."""
    report = yield
    call = getattr(report, "call", None)  # pytest keeps the CallInfo there until collect_one_node pops it
    errors = _unavailable(getattr(call, "excinfo", None)) if report.failed else []
    if not errors or call is None:  # (errors come from its excinfo)
        return report
    report.lazyops_missing = _missing_entries(errors)  # type: ignore[attr-defined]
    if fail_missing(collector.config):
        report.sections.append(("lazyops", _fail_note(errors)))
        return report
    location = _where_accessed(call.excinfo) or (str(collector.path), 1)
    report.outcome = "skipped"
    report.longrepr = (*location, missing_reason(errors))
    return report


def _missing_entries(errors: list[KernelUnavailableError]) -> list[list[str]]:
    """``[kernel, backend, how]`` for the summary: ``how`` is ``"lacks"`` (a kernel to port) or ``"declines"`` (the
    backend has it but not for the test's configuration: nothing to port for it, a configuration to serve)."""
    entries: list[list[str]] = []
    for error in errors:
        if error.declined:
            entries.extend([error.kernel, backend, "declines"] for backend, _ in error.declined)
        else:
            entries.append([error.kernel, error.backend, "lacks"])
    return entries


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The porting to-do list: which kernels each backend lacks (or declines for the tests' configurations), and how
    many tests each one held back."""
    tests: dict[tuple[str, str, str], int] = {}
    for outcome in ("skipped", "failed", "error"):
        for report in terminalreporter.stats.get(outcome, ()):
            for kernel, backend, *how in getattr(report, "lazyops_missing", ()):
                key = (backend, how[0] if how else "lacks", kernel)  # (a report from an older plugin has no how)
                tests[key] = tests.get(key, 0) + 1
    if not tests:
        return
    verb = "failed" if fail_missing(config) else "skipped"
    terminalreporter.write_sep("-", f"lazyops: tests {verb} for missing kernels")
    by_backend: dict[tuple[str, str], list[str]] = {}
    for (backend, how, kernel), count in sorted(tests.items()):
        by_backend.setdefault((backend, how), []).append(f"{kernel} ({count} test{'s' if count > 1 else ''})")
    for (backend, how), kernels in by_backend.items():
        where = " for the tests' configurations" if how == "declines" else ""
        terminalreporter.write_line(f"backend {backend!r} {how} {', '.join(kernels)}{where}")
    if verb == "skipped":
        terminalreporter.write_line("--lazyops-fail-missing turns these skips into failures")
