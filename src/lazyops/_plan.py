"""A plan: which backend serves each kernel configuration, as measured by ``lazyops tune``; data, not code.

A plan is one JSON file (schema ``lazyops-plan``, :data:`VERSION`; every field in ``docs/plan-schema.md``): where it
was measured (:func:`environment_here`), how (``timing``), and one :class:`Entry` per kernel configuration, naming
the backend chosen for it and every candidate's measured time. It is the lock as well as the choice: a plan applies
only where the environment it records is the one here (:func:`differences`), so a plan carried to another device,
or kept past an upgrade of torch, Triton, TileLang, lazyops or a backend, is seen to be stale instead of silently
choosing by another machine's figures.

A configuration is named by :func:`config_key`: the kernel and the bound configuration's fields (``spec.bind``'s
normalised arguments, dtypes by name), so every spelling of one configuration (``"bf16"``, ``torch.bfloat16``,
``eps`` positional or by keyword) finds the same entry.

A plan file is input from elsewhere (another rank's tuning, another machine): :func:`load` reads only a regular
file of at most :data:`MAX_BYTES` (a FIFO or a device is refused before anything is read, so a misdirected path
cannot hang the process) and validates every field, saying which one is wrong and how to make a new plan.

This module imports neither torch nor any backend at import: a resolution that reads ``LAZYOPS_PLAN`` pays for
JSON only, and the environment is probed (torch's device, the packages' versions) only when asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lazyops._errors import ConfigError

SCHEMA = "lazyops-plan"
VERSION = 1
#: The largest plan file :func:`load` reads: a plan of every configuration of a large engine is well under a MiB;
#: anything near this is not a plan, and reading it whole would only cost memory.
MAX_BYTES = 64 * 2**20
#: How a plan's times were taken (``timing.method``): per call inside CUDA graphs, streamed on a GPU (do_bench),
#: or back-to-back calls on the host.
METHODS = ("cuda-graph", "stream", "host")
#: The environment fields a plan is locked to, beside each backend's version; ``python`` is recorded, not compared
#: (a new Python does not change which kernel is faster).
LOCKED = ("device", "capability", "torch", "triton", "tilelang", "lazyops")
#: The packages whose versions :func:`environment_here` records.
PACKAGES = ("python", "torch", "triton", "tilelang", "lazyops")
WAY_OUT = "make a new plan with `lazyops tune` (`lazyops tune --from-trace TRACE` for an engine's configurations)"


@dataclass(frozen=True)
class Switch:
    """Below ``below`` tokens the kernel is ``backend``'s; from ``below`` on, the entry's ``choice``."""

    below: int
    backend: str


@dataclass
class Candidate:
    """One backend's figures for one configuration: µs per call at each token count, the spread of each (the
    samples' interquartile range over their median) and the worst relative error of its check against float64."""

    us: dict[int, float]
    error: float | None = None
    spread: dict[int, float] = field(default_factory=dict)

    def total(self) -> float:
        return sum(self.us.values())


@dataclass
class Entry:
    """One kernel configuration: the backend chosen (``choice``, or ``switch`` below a token count), the figures of
    every candidate timed, why each other backend was not (``rejected``: it failed to build, failed its check or
    failed while timed; ``declined``: its ``supports`` hook said it does not serve this configuration)."""

    kernel: str
    config: dict[str, Any]
    label: str
    choice: str
    switch: Switch | None = None
    candidates: dict[str, Candidate] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    declined: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return config_key(self.kernel, self.config)

    def backend_for(self, tokens: int) -> str:
        """The backend this entry picks for a call of ``tokens`` tokens."""
        return self.switch.backend if self.switch is not None and tokens < self.switch.below else self.choice


@dataclass
class Plan:
    """A whole plan file (``docs/plan-schema.md``)."""

    created: str
    command: str
    environment: dict[str, Any]
    timing: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)

    @functools.cached_property
    def index(self) -> dict[str, Entry]:
        """``{config_key: entry}``, built once (the plan is not changed once read)."""
        return {entry.key: entry for entry in self.entries}


# -- configuration keys ------------------------------------------------------------------------------------------


def config_key(kernel: str, config: Any) -> str:
    """``kernel`` and ``config``'s fields but ``label`` as canonical JSON: one string per configuration, however its
    factory call was spelt. ``config`` is a bound configuration (a dataclass, ``spec.bind``'s result) or its fields
    as a plan stores them (a mapping, dtypes by name). Keys are sorted: the key does not depend on field order, so
    a plan edited by hand or written by another version of a spec with its fields reordered still matches."""
    return json.dumps([kernel, config_fields(config)], sort_keys=True, separators=(",", ":"), allow_nan=True)


def config_fields(config: Any) -> dict[str, Any]:
    """The configuration's fields but ``label``, as JSON values (``torch.bfloat16`` -> ``"bfloat16"``, tuples as
    lists), in field order."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        items: Iterable[tuple[str, Any]] = ((f.name, getattr(config, f.name)) for f in dataclasses.fields(config))
    elif isinstance(config, Mapping):
        items = config.items()
    else:
        raise TypeError(f"a kernel configuration is a bound configuration or a mapping, not {type(config).__name__}")
    return {name: _json_value(value) for name, value in items if name != "label"}


def _json_value(value: Any) -> Any:
    if _is_torch_dtype(value):
        return str(value).removeprefix("torch.")
    if isinstance(value, (tuple, list)):
        return [_json_value(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _json_value(item) for key, item in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # an enum or the like: its text is its identity in a plan


def _is_torch_dtype(value: Any) -> bool:
    # Without importing torch: this module must stay cheap to import.
    kind = type(value)
    return kind.__name__ == "dtype" and kind.__module__ == "torch"


def config_from_json(kernel: str, fields: Mapping[str, Any]) -> Any:
    """The bound configuration a plan's entry names: ``spec.bind(**fields)`` (a configuration's field names are its
    factory's parameter names, and ``bind`` takes dtypes by name). Raises ``KernelInputError`` for fields the spec
    refuses, ``KeyError`` for a kernel without a spec."""
    from lazyops.specs import spec

    return spec(kernel).bind(**{name: value for name, value in fields.items() if name != "label"})


def factory_arguments(config: Any) -> dict[str, Any]:
    """The keyword arguments that rebuild ``config`` through its kernel's factory (its fields but ``label``)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "label"}


def lookup(plan: Plan, kernel: str, config: Any) -> Entry | None:
    """The plan's entry for ``kernel`` at ``config`` (bound, or its fields), or None when the plan does not name it."""
    return plan.index.get(config_key(kernel, config))


# -- the environment ---------------------------------------------------------------------------------------------


def environment_here(backends: Mapping[str, str | None]) -> dict[str, Any]:
    """What a plan is locked to, measured here: the device and its compute capability (``"cpu"`` and None without
    CUDA), the versions of Python, torch, Triton, TileLang and lazyops (None where not installed), and each of
    ``backends``' version. ``backends`` maps each backend's name to its origin here (``Registry.origins()``:
    ``"built-in"`` or its distribution; None where it is not registered here): this module never reads the registry."""
    import platform

    device, capability = _device()
    found: dict[str, Any] = {"device": device, "capability": capability}
    for package in PACKAGES:
        found[package] = platform.python_version() if package == "python" else _version(package)
    found["backends"] = {name: backend_version(origin) for name, origin in backends.items()}
    return found


def _device() -> tuple[str, str | None]:
    import torch

    if not torch.cuda.is_available():
        return "cpu", None
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return torch.cuda.get_device_name(index), f"{major}.{minor}"


def _version(package: str) -> str | None:
    if package == "lazyops":  # the running one: a source checkout on the path may differ from an installed wheel
        import lazyops

        return lazyops.__version__
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def backend_version(origin: str | None) -> str | None:
    """The version of a backend of this origin: its distribution's, lazyops' for a built-in, None for a backend not
    registered here (``origin`` None)."""
    if origin is None:
        return None
    return _version("lazyops") if origin == "built-in" else _version(origin)


def differences(plan: Plan, here: Mapping[str, Any]) -> list[str]:
    """What differs between the environment ``plan`` was measured in and ``here`` (:func:`environment_here` of the
    plan's backends), one line each (``"triton: plan 3.6.0, here 3.5.1"``); empty: the plan applies here."""
    found = []
    recorded = plan.environment
    for name in LOCKED:
        if recorded.get(name) != here.get(name):
            missing = "none (no CUDA device)" if name == "capability" else "not installed"
            found.append(f"{name}: plan {_shown(recorded.get(name), missing)}, here {_shown(here.get(name), missing)}")
    theirs, ours = recorded.get("backends", {}), here.get("backends", {})
    for name in theirs:
        if theirs[name] != ours.get(name):
            found.append(f"backend {printable(name)}: plan {_shown(theirs[name])}, here {_shown(ours.get(name))}")
    return found


def _shown(value: Any, missing: str = "not installed") -> str:
    return missing if value is None else brief(str(value))


#: The most characters of one plan string a line shows: a 5 MB field cost rich 26 s to wrap (issue 33.6).
SHOWN = 120


def brief(text: str, limit: int = SHOWN) -> str:
    """A string from a plan as a line shows it: escaped (:func:`printable`) and cut to ``limit`` with ``...``."""
    cut = text if len(text) <= limit else text[: limit - 3] + "..."
    return printable(cut)


def printable(text: str) -> str:
    """``text`` with each unprintable character as its escape (``\\x1b``): what a plan file says reaches a terminal
    only as text (issue 33.11), as ``lazyops.cli._output.printable`` writes it."""
    if text.isprintable():
        return text
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in text)


def applies_here(plan: Plan, origins: Mapping[str, str]) -> list[str]:
    """:func:`differences` between ``plan`` and this machine, whose backends come from ``origins`` (empty: it
    applies here)."""
    return differences(
        plan, environment_here({name: origins.get(name) for name in plan.environment.get("backends", {})})
    )


# -- reading and writing -----------------------------------------------------------------------------------------


def load(path: str | os.PathLike[str]) -> Plan:
    """The plan in ``path``, validated; ``ConfigError`` naming the file, the field, what is wrong and the way out."""
    text = _read(os.fspath(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise _error(path, None, f"not JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    except (RecursionError, ValueError) as error:
        raise _error(path, None, f"not JSON ({type(error).__name__}: nested or sized beyond reading)") from None
    deep = _too_deep(data)
    if deep is not None:
        raise _error(path, deep, f"nested more than {MAX_DEPTH} deep; no plan field is")
    return _plan(data, os.fspath(path))


#: How deep a plan's JSON may nest: a configuration's fields are a level or two; 500 levels reached a
#: ``RecursionError`` in whatever walked them next (issue 33.2).
MAX_DEPTH = 32


def _too_deep(data: Any) -> str | None:
    """The path of the first value nested more than :data:`MAX_DEPTH` deep, without recursion; None if none is."""
    pending: list[tuple[Any, str, int]] = [(data, "", 0)]
    while pending:
        value, where, depth = pending.pop()
        if depth > MAX_DEPTH:
            return where
        children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, child in children:
            inner = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
            pending.append((child, inner, depth + 1))
    return None


def _read(path: str) -> str:
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. The file is checked through the
    # descriptor, so what is read is what was checked, not whatever the path points at a moment later.
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise _error(path, None, "no such file") from None
    except OSError as error:
        raise _error(path, None, f"cannot be opened ({error.strerror or error})") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise _error(path, None, f"not a regular file (a {_file_kind(status.st_mode)})")
        if status.st_size > MAX_BYTES:
            raise _error(path, None, f"{status.st_size:,} bytes, more than a plan's limit of {MAX_BYTES:,}")
        with os.fdopen(descriptor, "rb", closefd=False) as opened:
            raw = opened.read(MAX_BYTES + 1)
    except OSError as error:  # e.g. a link to /proc/self/mem: EIO (issue 33.2)
        raise _error(path, None, f"cannot be read ({error.strerror or error})") from None
    finally:
        os.close(descriptor)
    if len(raw) > MAX_BYTES:  # it grew while being read
        raise _error(path, None, f"more than a plan's limit of {MAX_BYTES:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _error(path, None, f"not UTF-8 text (byte {error.start})") from None


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "folder"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    )
    return next((name for test, name in kinds if test(mode)), "special file")


def _error(path: str | os.PathLike[str], where: str | None, problem: str) -> ConfigError:
    field_part = f"{where}: " if where else ""
    return ConfigError(printable(f"plan {os.fspath(path)!r}: {field_part}{problem}; {WAY_OUT}"))


_TOP = ("schema", "version", "generated_by", "created", "command", "environment", "timing", "entries")
_ENTRY = ("kernel", "config", "label", "choice", "switch", "candidates", "rejected", "declined")


def _plan(data: Any, path: str) -> Plan:
    def fail(where: str | None, problem: str) -> ConfigError:
        return _error(path, where, problem)

    if not isinstance(data, dict):
        raise fail(None, f'a JSON {_json_kind(data)}, not a lazyops plan (a JSON object with "schema": {SCHEMA!r})')
    if data.get("schema") != SCHEMA:
        raise fail("schema", f"{data.get('schema')!r}, not {SCHEMA!r}: not a lazyops plan")
    version = data.get("version")
    if type(version) is not int or version != VERSION:  # 1.0 and true are not 1
        raise fail(
            "version",
            f"schema version {version!r}, and this lazyops (version {_version('lazyops')}) reads version {VERSION} "
            "only: the plan was written by another lazyops",
        )
    _no_unknown(data, _TOP, None, fail)
    created = _string(data, "created", "", fail)
    command = _string(data, "command", "", fail)
    environment = _environment(data.get("environment"), fail)
    timing = _timing(data.get("timing"), fail)
    entries_data = data.get("entries")
    if not isinstance(entries_data, list):
        raise fail("entries", f"a JSON {_json_kind(entries_data)}, expected a list of entries")
    entries = [_entry(item, f"entries[{index}]", fail) for index, item in enumerate(entries_data)]
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if entry.key in seen:
            raise fail(f"entries[{index}]", f"names the configuration of entries[{seen[entry.key]}] again")
        seen[entry.key] = index
    return Plan(created, command, environment, timing, entries)


def _no_unknown(data: dict[str, Any], known: tuple[str, ...], where: str | None, fail: Any) -> None:
    unknown = [name for name in data if name not in known]
    if unknown:
        place = f"{where}." if where else ""
        raise fail(f"{place}{unknown[0]}", f"an unknown field (a plan has {', '.join(known)})")


def _string(data: dict[str, Any], name: str, where: str, fail: Any) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise fail(f"{where}{name}", f"a JSON {_json_kind(value)}, expected a string")
    return value


def _environment(data: Any, fail: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise fail("environment", f"a JSON {_json_kind(data)}, expected an object")
    for name in ("device", "lazyops"):
        if not isinstance(data.get(name), str):
            raise fail(f"environment.{name}", f"a JSON {_json_kind(data.get(name))}, expected a string")
    for name in (*LOCKED, *PACKAGES):
        if not (data.get(name) is None or isinstance(data[name], str)):
            raise fail(f"environment.{name}", f"a JSON {_json_kind(data[name])}, expected a string or null")
    backends = data.get("backends")
    if not isinstance(backends, dict) or not all(v is None or isinstance(v, str) for v in backends.values()):
        raise fail("environment.backends", "expected an object of backend names and versions (strings or null)")
    _no_unknown(data, (*LOCKED, *PACKAGES, "backends"), "environment", fail)
    return data


def _timing(data: Any, fail: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise fail("timing", f"a JSON {_json_kind(data)}, expected an object")
    if data.get("method") not in METHODS:
        raise fail("timing.method", f"{data.get('method')!r}, expected one of {', '.join(METHODS)}")
    for name in ("tokens", "checked_at"):
        counts = data.get(name) if name == "tokens" else data.get(name, [1])
        if not isinstance(counts, list) or not counts or not all(_is_count(count) for count in counts):
            raise fail(f"timing.{name}", "expected a list of positive token counts")
    if not _is_count(data.get("rounds", 1)):
        raise fail("timing.rounds", "expected a positive whole number")
    _no_unknown(data, ("method", "tokens", "rounds", "checked_at"), "timing", fail)
    return data


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _entry(data: Any, where: str, fail: Any) -> Entry:
    if not isinstance(data, dict):
        raise fail(where, f"a JSON {_json_kind(data)}, expected an entry object")
    _no_unknown(data, _ENTRY, where, fail)
    kernel = _string(data, "kernel", f"{where}.", fail)
    label = _string(data, "label", f"{where}.", fail)
    choice = _string(data, "choice", f"{where}.", fail)
    config = data.get("config")
    if not isinstance(config, dict) or not config:
        raise fail(f"{where}.config", "expected the configuration's fields as a non-empty object")
    switch = None
    if data.get("switch") is not None:
        raw = data["switch"]
        if not isinstance(raw, dict) or set(raw) != {"below", "backend"}:
            raise fail(f"{where}.switch", 'expected {"below": token count, "backend": name} or null')
        if not _is_count(raw["below"]) or not isinstance(raw["backend"], str):
            raise fail(f"{where}.switch", "'below' must be a positive token count and 'backend' a backend name")
        switch = Switch(raw["below"], raw["backend"])
    candidates = {}
    raw_candidates = data.get("candidates", {})
    if not isinstance(raw_candidates, dict):
        raise fail(f"{where}.candidates", f"a JSON {_json_kind(raw_candidates)}, expected an object")
    for backend, figures in raw_candidates.items():
        candidates[backend] = _candidate(figures, f"{where}.candidates.{backend}", fail)
    rejected = _reasons(data.get("rejected", {}), f"{where}.rejected", fail)
    declined = _reasons(data.get("declined", {}), f"{where}.declined", fail)
    for chosen in [choice] + ([switch.backend] if switch else []):
        if chosen not in candidates:
            raise fail(f"{where}.choice", f"{chosen!r} is not one of the entry's candidates")
    return Entry(kernel, config, label, choice, switch, candidates, rejected, declined)


def _candidate(data: Any, where: str, fail: Any) -> Candidate:
    if not isinstance(data, dict) or not isinstance(data.get("us"), dict):
        raise fail(where, 'expected {"us": {tokens: µs}, "error": relative error or null}')
    _no_unknown(data, ("us", "error", "spread"), where, fail)
    error = data.get("error")
    if error is not None and not _is_number(error):
        raise fail(f"{where}.error", f"a JSON {_json_kind(error)}, expected a number or null")
    spread = _per_token(data.get("spread", {}), f"{where}.spread", fail)
    return Candidate(_per_token(data["us"], f"{where}.us", fail), error, spread)


def _per_token(data: Any, where: str, fail: Any) -> dict[int, float]:
    if not isinstance(data, dict):
        raise fail(where, f"a JSON {_json_kind(data)}, expected an object of token counts and numbers")
    found = {}
    for tokens, value in data.items():
        if not (tokens.isascii() and tokens.isdigit() and int(tokens) > 0):  # not "²", "١٢" or "１"
            raise fail(f"{where}.{tokens}", "keys are token counts (positive whole numbers)")
        if not _is_number(value) or value < 0:
            raise fail(f"{where}.{tokens}", f"{value!r}, expected a number of at least 0")
        found[int(tokens)] = float(value)
    return found


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _reasons(data: Any, where: str, fail: Any) -> dict[str, str]:
    if not isinstance(data, dict) or not all(isinstance(reason, str) for reason in data.values()):
        raise fail(where, "expected an object of backend names and reasons (strings)")
    return dict(data)


def _json_kind(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def as_json(plan: Plan) -> dict[str, Any]:
    """The plan as the JSON object its file holds."""
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "generated_by": f"`{plan.command}`; do not edit: rerun the command, or `lazyops tune`, to make a new plan",
        "created": plan.created,
        "command": plan.command,
        "environment": plan.environment,
        "timing": plan.timing,
        "entries": [_entry_json(entry) for entry in plan.entries],
    }


def _entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "kernel": entry.kernel,
        "config": config_fields(entry.config),
        "label": entry.label,
        "choice": entry.choice,
        "switch": None if entry.switch is None else {"below": entry.switch.below, "backend": entry.switch.backend},
        "candidates": {
            backend: {
                "us": {str(tokens): us for tokens, us in figures.us.items()},
                "spread": {str(tokens): spread for tokens, spread in figures.spread.items()},
                "error": figures.error,
            }
            for backend, figures in entry.candidates.items()
        },
        "rejected": entry.rejected,
        "declined": entry.declined,
    }


def pretty(value: Any, indent: str = "", key: str = "") -> str:
    """JSON for people: each object or array on one line where it fits in :data:`WIDTH` columns (a candidate's times,
    a configuration), else one member a line. ``key`` is what precedes ``value`` on its line."""
    flat = json.dumps(value, allow_nan=False, ensure_ascii=False)
    if len(indent) + len(key) + len(flat) <= WIDTH or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = indent + "  "
    if isinstance(value, dict):
        members = []
        for name, item in value.items():
            prefix = f"{json.dumps(name, ensure_ascii=False)}: "
            members.append(f"{inner}{prefix}{pretty(item, inner, prefix)}")
        return "{\n" + ",\n".join(members) + f"\n{indent}}}"
    return "[\n" + ",\n".join(f"{inner}{pretty(item, inner)}" for item in value) + f"\n{indent}]"


#: The widest line :func:`pretty` keeps an object or array on.
WIDTH = 116


def save(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write ``plan`` to ``path`` atomically: a reader (another rank) sees the old file or the new one, never half.

    The text goes to a temporary file in the same folder, flushed to disk, then replaces ``path`` in one rename;
    the file keeps the mode of the one it replaces (else ``rw-r--r--``: every rank, whoever runs it, reads it).
    """
    import tempfile

    target = os.path.realpath(os.fspath(path))  # a symlink is written through, not replaced (issue 33.5)
    folder = os.path.dirname(target)
    text = pretty(as_json(plan)) + "\n"
    try:
        kind = os.stat(target).st_mode
    except OSError:
        mode = 0o644
    else:
        if not stat.S_ISREG(kind):  # never replace a device, a FIFO or a socket (as root: /dev/null)
            raise ConfigError(
                f"plan {os.fspath(path)!r}: not a regular file; a plan is saved only to a file or a new path"
            )
        mode = stat.S_IMODE(kind)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as written:
            written.write(text)
            written.flush()
            os.fsync(written.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


# -- the plan in force -------------------------------------------------------------------------------------------


def check_in_force(environ: Mapping[str, str] | None = None) -> None:
    """Raise the ``ConfigError`` every kernel access would raise if ``LAZYOPS_PLAN`` names a plan that cannot be
    used (missing, a FIFO, malformed): ``lazyops list`` and ``which`` must not answer as if all were well (33.9)."""
    path = (os.environ if environ is None else environ).get("LAZYOPS_PLAN", "").strip()
    if path:
        load(os.path.expanduser(path))


def plan_status(origins: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str | None:
    """One line on the plan ``LAZYOPS_PLAN`` names, for ``lazyops doctor`` and ``lazyops list``: its path, its entry
    count and whether it applies here with these backends' ``origins`` (or why not); None when no plan is set."""
    path = (os.environ if environ is None else environ).get("LAZYOPS_PLAN", "").strip()
    if not path:
        return None
    try:
        plan = load(path)
    except ConfigError as error:
        return f"cannot be used: {error}"
    entries = f"{len(plan.entries)} {'entry' if len(plan.entries) == 1 else 'entries'}"
    found = applies_here(plan, origins)
    if not found:
        return f"{path}: {entries}, measured here ({brief(plan.environment['device'])}): applies"
    return f"{path}: {entries}, not applied here: {'; '.join(found)}"
