"""Settings: parsed from the environment or from ``configure()`` into one immutable object.

Parsing here is syntax only (a comma list, a boolean, a path). Whether a backend name is registered or a
fallback name is exported needs the backends, so that check lives with the resolution order
(``_resolve.validate``); both raise ``ConfigError`` naming the variable (or the ``configure`` argument), the
bad value and the valid choices.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from lazyops._errors import ConfigError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


class Settings:
    """One configuration, immutable once built.

    ``chain`` is ``None`` for the platform default (the default is found only when needed, so strict mode with an
    explicit chain never probes the platform). ``origin`` maps each of ``backend``, ``fallback``, ``strict`` to
    where its value came from, so an error can name the variable or argument the user has to change.
    """

    __slots__ = ("chain", "fallback", "strict", "verbose", "trace", "trace_args", "origin")
    chain: tuple[str, ...] | None
    fallback: frozenset[str]
    strict: bool
    verbose: bool
    trace: str | None
    trace_args: bool
    origin: dict[str, str]

    def __init__(
        self,
        chain: tuple[str, ...] | None = None,
        fallback: frozenset[str] = frozenset(),
        strict: bool = False,
        verbose: bool = False,
        trace: str | None = None,
        trace_args: bool = False,
        origin: Mapping[str, str] | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "chain", chain)
        set_(self, "fallback", frozenset(fallback))
        set_(self, "strict", strict)
        set_(self, "verbose", verbose)
        set_(self, "trace", trace)
        set_(self, "trace_args", trace_args)
        set_(self, "origin", dict(origin or {"backend": "LAZYOPS_BACKEND", "fallback": "LAZYOPS_FALLBACK", "strict": "LAZYOPS_STRICT"}))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Settings are immutable; use lazyops.configure() to change {name}")

    def replace(self, **changes: Any) -> Settings:
        values = {name: getattr(self, name) for name in self.__slots__}
        origin = dict(values["origin"])
        origin.update(changes.pop("origin", {}))
        values.update(changes, origin=origin)
        return Settings(**values)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__ if name != "origin")
        return f"Settings({fields})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Settings):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__ if n != "origin")

    __hash__ = None  # type: ignore[assignment]


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
        raise ConfigError(f"{source}={_shown(value)} names {', '.join(map(repr, repeated))} more than once; name each once")
    return tuple(items)


def _shown(value: str | Iterable[str]) -> str:
    return repr(value if isinstance(value, str) else ",".join(map(str, value)))


def parse_chain(source: str, value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """``LAZYOPS_BACKEND``: unset or empty is the platform default; else a priority chain of backend names."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    chain = parse_name_list(source, value, "backend names")
    if not chain:
        raise ConfigError(f"{source}: an empty list of backends; pass None for the platform default")
    return chain


def parse_fallback(source: str, value: str | Iterable[str] | None) -> frozenset[str]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return frozenset()
    return frozenset(parse_name_list(source, value, "kernel names"))


def expand_trace_path(template: str) -> str:
    """Fill ``{pid}`` and ``{rank}`` so that processes of one job write separate files."""
    try:
        return template.format(pid=os.getpid(), rank=current_rank())
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(
            f"LAZYOPS_TRACE={template!r} has a placeholder other than {{pid}} and {{rank}} ({error}); "
            "double a brace ({{ or }}) to write it literally"
        ) from None


def current_rank() -> int:
    """This process's data-parallel rank (``RANK``, else ``LOCAL_RANK``), 0 when neither is set."""
    for variable in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(variable, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"{variable}={value!r} is not an integer rank") from None
    return 0


def settings_from_environment(environ: Mapping[str, str]) -> Settings:
    """Parse every ``LAZYOPS_*`` variable; the first malformed one raises ``ConfigError``."""
    trace_template = environ.get("LAZYOPS_TRACE", "").strip() or None
    trace = None
    if trace_template is not None:
        trace = expand_trace_path(trace_template)
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
    )


def apply_overrides(base: Settings, overrides: Mapping[str, Any]) -> Settings:
    """``configure()``'s arguments over the environment's settings; arguments left out keep ``base``'s values."""
    changes: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if "backend" in overrides:
        changes["chain"] = parse_chain("configure(backend=...)", overrides["backend"])
        origin["backend"] = "configure(backend=...)"
    if "fallback" in overrides:
        changes["fallback"] = parse_fallback("configure(fallback=...)", overrides["fallback"])
        origin["fallback"] = "configure(fallback=...)"
    if "strict" in overrides:
        strict = overrides["strict"]
        if not isinstance(strict, bool):
            raise ConfigError(f"configure(strict=...) must be True or False, got {strict!r}")
        changes["strict"] = strict
        origin["strict"] = "configure(strict=...)"
    return base.replace(origin=origin, **changes)
