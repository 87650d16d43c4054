"""Settings: parsed from the environment or from ``configure()`` into one immutable object.

Parsing here is syntax only (a comma list, a boolean, a path). Whether a backend name is registered or a
fallback name is exported needs the backends, so that check lives with the resolution order
(``_resolve.validate``); both raise ``ConfigError`` naming the variable (or the ``configure`` argument), the
bad value and the valid choices.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from lazyops._errors import ConfigError

TYPE_CHECKING = False  # typing's own constant would cost importing typing on the first access
if TYPE_CHECKING:
    from typing import Any

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

#: Every environment variable lazyops reads, with what it does: the one list behind the misspelling check
#: (``unknown_variables``) and ``lazyops doctor``'s table.
VARIABLES = {
    "LAZYOPS_BACKEND": "the selected backend, or a priority chain",
    "LAZYOPS_FALLBACK": "kernels that must come from the platform default",
    "LAZYOPS_STRICT": "no fallback of any kind",
    "LAZYOPS_VERBOSE": "name every inherited kernel; print on every rank",
    "LAZYOPS_TRACE": "the file the construction trace is appended to",
    "LAZYOPS_TRACE_ARGS": "trace the construction arguments too",
    "LAZYOPS_PLAN": "a plan file (lazyops tune): the backend of each configuration it names",
    "LAZYOPS_PLAN_STRICT": "a plan made elsewhere or stale is an error, not a warning",
    "EAGER_IMPORT": "resolve every kernel at import",
    "RANK": "this process's data-parallel rank: only rank 0 prints",
    "LOCAL_RANK": "the rank, where RANK is not set",
}

_VARIABLE_OF = {
    "backend": "LAZYOPS_BACKEND",
    "fallback": "LAZYOPS_FALLBACK",
    "strict": "LAZYOPS_STRICT",
    "plan": "LAZYOPS_PLAN",
}
"""The environment variable behind each ``configure()`` argument."""


class Settings:
    """The settings, immutable once built.

    ``chain`` is ``None`` for the platform default (the default is found only when needed, so strict mode with an
    explicit chain never probes the platform). ``rank`` is the data-parallel rank (``RANK``, else ``LOCAL_RANK``),
    read once with the rest so that every line printed under one set of settings agrees on it. ``origin`` maps each
    of ``backend``, ``fallback``, ``strict`` to where its value came from, so an error can name the variable or
    argument the user has to change; it is not part of the settings' value (two equal settings may come from
    different places).

    Written out rather than a frozen dataclass: the ``dataclasses`` machinery costs milliseconds at import, on the
    first kernel access, for what these few methods do.
    """

    __slots__ = (
        "chain",
        "fallback",
        "origin",
        "plan",
        "plan_strict",
        "rank",
        "strict",
        "trace",
        "trace_args",
        "verbose",
    )
    # compared, hashed, shown
    _VALUE = ("chain", "fallback", "strict", "verbose", "trace", "trace_args", "rank", "plan", "plan_strict")

    chain: tuple[str, ...] | None
    fallback: frozenset[str]
    strict: bool
    verbose: bool
    trace: str | None
    trace_args: bool
    rank: int
    #: the plan file's path (``LAZYOPS_PLAN``), read and checked against this machine when the settings are read
    plan: str | None
    plan_strict: bool
    origin: Mapping[str, str]

    def __init__(
        self,
        chain: tuple[str, ...] | None = None,
        fallback: frozenset[str] = frozenset(),
        strict: bool = False,
        verbose: bool = False,
        trace: str | None = None,
        trace_args: bool = False,
        rank: int = 0,
        plan: str | None = None,
        plan_strict: bool = False,
        origin: Mapping[str, str] | None = None,
    ) -> None:
        origin = dict(_VARIABLE_OF) if origin is None else origin
        values = (chain, fallback, strict, verbose, trace, trace_args, rank, plan, plan_strict)
        for name, value in zip(self._VALUE, values, strict=True):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "origin", origin)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: Settings are immutable; use replace()")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: Settings are immutable")

    def __reduce__(self) -> tuple[type[Settings], tuple[object, ...]]:
        return (Settings, (*self._value(), dict(self.origin)))

    def _value(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._VALUE)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__ or not isinstance(other, Settings):
            return NotImplemented
        return self._value() == other._value()

    def __hash__(self) -> int:
        return hash(self._value())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._VALUE)
        return f"{type(self).__qualname__}({fields})"

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes``; ``origin`` given here updates the origins rather than replacing them all."""
        origin = {**self.origin, **changes.pop("origin", {})}
        unknown = set(changes) - set(self._VALUE)
        if unknown:
            raise TypeError(f"Settings has no field {sorted(unknown)[0]!r}")
        values = {name: getattr(self, name) for name in self._VALUE}
        return Settings(**{**values, **changes}, origin=origin)


def parse_bool(source: str, value: str) -> bool:
    """Our booleans: ``1/true/yes/on`` and ``0/false/no/off/""``, any case; anything else is a mistake."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(
        f"{source}={value!r} is not a boolean; use 1, true, yes or on to enable, 0, false, no, off or empty to disable"
    )


def parse_name_list(source: str, value: str | Iterable[str], what: str) -> tuple[str, ...]:
    """A comma list (or an iterable from code) of names: stripped, no empty entries, no repeats."""
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
    else:
        items = list(value)
        for item in items:
            if not isinstance(item, str):
                raise ConfigError(f"{source}: {what} must be strings, got {type(item).__name__} {item!r}")
        items = [item.strip() for item in items]
    if any(not item for item in items):
        raise ConfigError(f"{source}={_shown(value)} has an empty entry; write {what} separated by single commas")
    repeated = sorted({item for item in items if items.count(item) > 1})
    if repeated:
        raise ConfigError(
            f"{source}={_shown(value)} names {', '.join(map(repr, repeated))} more than once; name each once"
        )
    return tuple(items)


def _shown(value: str | Iterable[str]) -> str:
    return repr(value if isinstance(value, str) else ",".join(map(str, value)))


def parse_chain(source: str, value: object) -> tuple[str, ...] | None:
    """``LAZYOPS_BACKEND`` or ``configure(backend=...)``: ``None`` (or empty) is the platform default; else a
    priority chain, from a comma list or an ordered sequence of names. A set is refused: its order, which is the
    chain's meaning, would depend on ``PYTHONHASHSEED``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, (set, frozenset)) or (not isinstance(value, (str, list, tuple))):
        kind = "an unordered set" if isinstance(value, (set, frozenset)) else f"a {type(value).__name__}"
        raise ConfigError(
            f"{source} got {kind} ({value!r}); a priority chain is ordered: pass a name, a comma list "
            "('triton,torch'), a list or tuple of names, or None for the platform default"
        )
    chain = parse_name_list(source, value, "backend names")
    if not chain:
        raise ConfigError(f"{source}: an empty list of backends; pass None for the platform default")
    return chain


def parse_fallback(source: str, value: object) -> frozenset[str]:
    """``LAZYOPS_FALLBACK`` or ``configure(fallback=...)``: kernel names, as a comma list or any collection of
    names (order does not matter here, so a set is fine)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return frozenset()
    if not isinstance(value, str) and (isinstance(value, (Mapping, bytes)) or not isinstance(value, Iterable)):
        raise ConfigError(
            f"{source} got a {type(value).__name__} ({value!r}); pass kernel names as a comma list, a list, tuple "
            "or set of names, or None for none"
        )
    return frozenset(parse_name_list(source, value, "kernel names"))


def parse_strict(source: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{source} must be True or False, got {type(value).__name__} {value!r}")
    return value


def expand_trace_path(template: str, rank: int) -> str:
    """Fill ``{pid}`` and ``{rank}`` so that processes of one job write separate files."""
    try:
        return template.format(pid=os.getpid(), rank=rank)
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(
            f"LAZYOPS_TRACE={template!r} has a placeholder other than {{pid}} and {{rank}} ({error}); "
            "double a brace ({{ or }}) to write it literally"
        ) from None


def parse_rank(environ: Mapping[str, str]) -> int:
    """This process's data-parallel rank (``RANK``, else ``LOCAL_RANK``), 0 when neither is set.

    A value that is not an integer is a ``ConfigError``, raised whenever the settings are read, like any other
    malformed variable: guessing would either silence rank 0's lines or print every rank's, and a launcher that
    sets ``RANK`` wrongly has other things to fix too.
    """
    for variable in ("RANK", "LOCAL_RANK"):
        value = environ.get(variable, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise ConfigError(
                    f"{variable}={value!r} is not an integer rank (lazyops reads RANK, else LOCAL_RANK, so that only "
                    "rank 0 prints); set it to this process's rank, or unset it"
                ) from None
    return 0


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """Each ``LAZYOPS_*`` variable (any case) of ``environ`` that lazyops does not read, sorted, with the known
    variable nearest to it (``None`` when none is near).

    A misspelt variable would otherwise be ignored without a word. Not an error: one environment may serve several
    versions of lazyops, and a newer one's variable is unknown to an older one.
    """
    prefix = len("LAZYOPS_")
    unknown = sorted(name for name in environ if name[:prefix].upper() == "LAZYOPS_" and name not in VARIABLES)
    if not unknown:
        return []
    import difflib  # only when there is something to suggest

    # Compared without the prefix that all of them share, which would make every name look near every other.
    known = {name[prefix:]: name for name in VARIABLES if name.startswith("LAZYOPS_")}
    nearest = {name: difflib.get_close_matches(name[prefix:].upper(), known, n=1) for name in unknown}
    return [(name, known[nearest[name][0]] if nearest[name] else None) for name in unknown]


def settings_from_environment(environ: Mapping[str, str]) -> Settings:
    """Parse every ``LAZYOPS_*`` variable and the rank; the first malformed one raises ``ConfigError``."""
    rank = parse_rank(environ)
    trace_template = environ.get("LAZYOPS_TRACE", "").strip() or None
    trace = None
    if trace_template is not None:
        trace = expand_trace_path(trace_template, rank)
        directory = os.path.dirname(os.path.abspath(trace))
        if not os.path.isdir(directory):
            raise ConfigError(
                f"LAZYOPS_TRACE={trace_template!r}: the directory {directory!r} does not exist; create it or "
                "point LAZYOPS_TRACE elsewhere"
            )
    return Settings(
        chain=parse_chain("LAZYOPS_BACKEND", environ.get("LAZYOPS_BACKEND")),
        fallback=parse_fallback("LAZYOPS_FALLBACK", environ.get("LAZYOPS_FALLBACK")),
        strict=parse_bool("LAZYOPS_STRICT", environ.get("LAZYOPS_STRICT", "")),
        verbose=parse_bool("LAZYOPS_VERBOSE", environ.get("LAZYOPS_VERBOSE", "")),
        trace=trace,
        trace_args=parse_bool("LAZYOPS_TRACE_ARGS", environ.get("LAZYOPS_TRACE_ARGS", "")),
        rank=rank,
        plan=parse_plan("LAZYOPS_PLAN", environ.get("LAZYOPS_PLAN")),
        plan_strict=parse_bool("LAZYOPS_PLAN_STRICT", environ.get("LAZYOPS_PLAN_STRICT", "")),
    )


def parse_plan(source: str, value: object) -> str | None:
    """A plan's path (``None`` or empty: no plan); the file itself is read with the rest, by ``_plan.load``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{source}: a plan is a file's path (made by `lazyops tune`), got {type(value).__name__}")
    return os.path.expanduser(os.fspath(value))


_PARSE_ARGUMENT = {
    "backend": ("chain", parse_chain),
    "fallback": ("fallback", parse_fallback),
    "strict": ("strict", parse_strict),
    "plan": ("plan", parse_plan),
}


def apply_overrides(base: Settings, overrides: Mapping[str, Any]) -> Settings:
    """``configure()``'s arguments over the environment's settings; arguments left out keep ``base``'s values."""
    changes: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for argument, value in overrides.items():
        field_name, parse = _PARSE_ARGUMENT[argument]
        source = f"configure({argument}=...)"
        changes[field_name] = parse(source, value)
        origin[argument] = source
    return base.replace(origin=origin, **changes)


def environment_without_overridden(environ: Mapping[str, str], overrides: Mapping[str, Any]) -> Mapping[str, str]:
    """The environment minus the variables ``configure()`` overrides: their values cannot matter, so they are not
    parsed and cannot be a mistake."""
    if not overrides:
        return environ  # not copied: os.environ decodes every variable it yields
    overridden = {_VARIABLE_OF[argument] for argument in overrides}
    return {name: value for name, value in environ.items() if name not in overridden}
