"""The errors lazyops raises, each a subclass of the builtin that its callers already handle.

The base classes are the point: ``KernelUnavailableError`` is an ``AttributeError`` so that ``hasattr`` and
``getattr(lazyops, name, default)`` keep working as probes; ``ConfigError`` is a ``ValueError`` precisely so that
``hasattr`` does *not* swallow a configuration mistake; ``BackendError`` is an ``ImportError`` because a backend
that cannot be loaded is an import problem with an install as its cure.

This module is imported by ``import lazyops``: it imports nothing.
"""


class LazyopsError(Exception):
    """Base of every lazyops-specific error, for callers that want to catch them all."""


class KernelUnavailableError(LazyopsError, AttributeError):
    """A known kernel that the selected backends do not export, with no fallback allowed to supply it; or one they
    export but decline for the configuration asked about (``declined``: each such backend with its reason, in the
    order they were asked), with no backend left that serves it."""

    def __init__(
        self,
        kernel: str,
        backend: str,
        available_in: tuple[str, ...],
        message: str,
        declined: tuple[tuple[str, str], ...] = (),
    ) -> None:
        # AttributeError's name/obj let tracebacks and IDEs point at the attribute that failed.
        super().__init__(message, name=kernel, obj=None)
        self.kernel = kernel
        self.backend = backend
        self.available_in = available_in
        self.declined = declined

    def __reduce__(
        self,
    ) -> tuple[
        "type[KernelUnavailableError]", tuple[str, str, tuple[str, ...], str, tuple[tuple[str, str], ...]]
    ]:  # keep pickling (multiprocessing, pytest-xdist) working with the extra fields
        return (type(self), (self.kernel, self.backend, self.available_in, str(self), self.declined))


class ConfigError(LazyopsError, ValueError):
    """A malformed or contradictory configuration, from the environment or from ``configure()``."""


class BackendError(LazyopsError, ImportError):
    """A backend that cannot be loaded or cannot run here.

    ``.backend`` names it; ``.missing`` is true when its package is not installed (the message says what to
    install), false when importing it failed (the original error is chained as ``__cause__``) or when it cannot
    run on this machine.
    """

    def __init__(self, message: str, *, backend: str, missing: bool = False) -> None:
        super().__init__(message, name=backend)
        self.backend = backend
        self.missing = missing

    def __reduce__(self) -> tuple[object, tuple[str, str, bool]]:
        return (_rebuild_backend_error, (str(self), self.backend, self.missing))


def _rebuild_backend_error(message: str, backend: str, missing: bool) -> BackendError:
    return BackendError(message, backend=backend, missing=missing)


class KernelInputError(LazyopsError, ValueError):
    """A kernel factory or kernel called with arguments it cannot serve (shape, dtype, device, layout)."""


def hide_in_pytest_tracebacks(excinfo: object) -> bool:
    """The ``__tracebackhide__`` of the modules a ``KernelUnavailableError`` passes through on its way from a
    kernel access: pytest then ends such a traceback at the line that asked for the kernel (``--fulltrace`` shows
    everything). Other errors keep their frames: there, lazyops' code may be what needs reading."""
    return isinstance(getattr(excinfo, "value", None), KernelUnavailableError)
