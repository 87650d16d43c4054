"""``lazyops stubs``: the generated ``.pyi`` that lets type checkers and IDEs see every kernel.

A module whose names come from a PEP 562 ``__getattr__`` is opaque to type checkers: mypy types every attribute
of it as ``Any``, so ``lazyops.rmsnrom_tl(...)`` would pass. The stub written here declares each kernel factory
with its signature and docstring, the kernel it returns, and the rest of the public API; a name it does not
declare is an error for the checker.

The kernel is typed as a ``Protocol`` whose ``__call__`` takes positional-only parameters (``SoftmaxKernel`` in the
torch backend), not as ``Callable[[Tensor], Tensor]``: both check a call the same way, but the protocol carries the
parameter names and a docstring with the shapes, which is what an IDE shows at ``kernel(``. Positional-only,
because that is all the backends promise: each names its kernel's parameters as it likes.

Where the text comes from: each backend's kernel list (its manifest, read without importing it) says which kernels
exist; each kernel's signature is the torch backend's (the canonical one), or, for a kernel only a third-party
backend has, that backend's own. Generating imports the kernel modules that supply those signatures, nothing else.

The same comparison that picks the torch backend's signature checks the other backends against it
(:func:`lazyops._signature.signature_mismatches`), so a backend that drifts is named together with the parameter
that differs.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from lazyops._annotations import Renderer, SignatureError
from lazyops._errors import ConfigError
from lazyops._registry import BUILTINS, Registry
from lazyops._resolve import LAST_RESORT, suggest
from lazyops._signature import evaluated_signature

#: The backends whose kernels the committed stub declares.
DEFAULT_BACKENDS = tuple(name for name, _, _ in BUILTINS)

#: Where the stub lives in a source checkout, relative to its root; ``PACKAGE_STUB`` is what the wheel carries
#: (a symlink to ``STUB`` in the repository, so there is one text; a checkout without symlinks gets a copy).
STUB = Path("stubs", "lazyops", "__init__.pyi")
PACKAGE_STUB = Path("src", "lazyops", "__init__.pyi")

#: The public API beside the kernels. ``lazyops/__init__.py`` keeps these unannotated to stay import-free, so their
#: types are written here; the docstrings are taken from the functions themselves. ``render_stub`` refuses to run
#: when ``lazyops.__all__`` names something this table lacks, so a new public name cannot be forgotten.
PUBLIC_FUNCTIONS = {
    "configure": (
        "def configure(\n"
        "    backend: str | Iterable[str] | None = ...,\n"
        "    fallback: str | Iterable[str] | None = ...,\n"
        "    strict: bool = ...,\n"
        "    plan: str | PathLike[str] | None = ...,\n"
        ") -> Settings:"
    ),
    "which": "def which(name: str, *args: Any, **kwargs: Any) -> Resolution:",
    "backends": "def backends() -> tuple[str, ...]:",
    "kernels": "def kernels() -> tuple[str, ...]:",
    "resolve_all": "def resolve_all() -> tuple[str, ...]:",
}
PUBLIC_ERRORS = ("BackendError", "ConfigError", "KernelInputError", "KernelUnavailableError", "LazyopsError")
#: Private names the package itself reaches through the module (its command line, its pytest plugin): once the stub
#: exists, type checkers read it instead of ``__init__.py``, so what it leaves out does not exist for them.
PRIVATE_FUNCTIONS: dict[str, str] = {}
#: What the stub imports besides the modules its kernels' annotations need (those are collected as it is written).
TYPING_IMPORTS = (
    "from collections.abc import Iterable",
    "from os import PathLike",
    "from typing import Any, Protocol, type_check_only",
)
LAZYOPS_IMPORTS = (
    "from lazyops._settings import Settings",
    "from lazyops._errors import (\n" + "".join(f"    {name} as {name},\n" for name in PUBLIC_ERRORS) + ")",
    "from lazyops._resolve import Resolution",
)


#: A signature or annotation that cannot be written as a stub (the same error the signature checker raises).
StubError = SignatureError


# -- the catalogue -------------------------------------------------------------------------------------------------
def parse_backends(backends: str | Iterable[str] | None) -> tuple[str, ...]:
    if backends is None:
        return DEFAULT_BACKENDS
    names = [name.strip() for name in backends.split(",")] if isinstance(backends, str) else list(backends)
    if not names or not all(names):
        raise ConfigError(f"--backends {backends!r}: give a comma list of backend names, e.g. torch,triton")
    return tuple(dict.fromkeys(names))


def factory(registry: Registry, backend: str, kernel: str) -> Callable[..., Any]:
    """``backend``'s own factory object for ``kernel``, imported directly.

    Not through ``Backend.kernel``: that refuses a backend that cannot *run* here (Triton without a GPU), while
    reading a signature only needs the module to import.
    """
    entry = registry[backend]
    submodule, attribute = entry.manifest()[kernel]
    module = entry.load() if submodule is None else importlib.import_module(f"{entry.module_name}.{submodule}")
    factory: Callable[..., Any] = getattr(module, attribute)
    return factory


def catalogue(registry: Registry, backends: Sequence[str]) -> dict[str, str]:
    """``{kernel: the backend whose signature is canonical}`` for every kernel the given backends export."""
    for name in backends:
        if name not in registry:
            raise ConfigError(
                f"--backends names {name!r}, which is not registered.{suggest(name, registry.names)} "
                f"Known backends: {', '.join(registry.names)}"
            )
    canonical = registry[LAST_RESORT].exports() if LAST_RESORT in registry else frozenset()
    owners: dict[str, str] = {}
    for name in backends:
        for kernel in sorted(registry[name].exports()):
            owners.setdefault(kernel, LAST_RESORT if kernel in canonical else name)
    return dict(sorted(owners.items()))


def docstring(text: str | None, indent: str) -> list[str]:
    if not text:
        return []
    lines = inspect.cleandoc(text).replace("\\", "\\\\").replace('"""', '\\"\\"\\"').splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    body = [f"{indent}{line}" if line else "" for line in lines[1:]]
    return [f'{indent}"""{lines[0]}', *body, f'{indent}"""']


def definition(head: str, doc: str | None, indent: str = "") -> list[str]:
    """``head`` (ending in ``:``) with the docstring as its body, or ``...`` without one."""
    lines = docstring(doc, indent + "    ")
    return [f"{indent}{head}", *lines] if lines else [f"{indent}{head} ..."]


# -- the stub ----------------------------------------------------------------------------------------------------
def command(backends: Sequence[str]) -> str:
    """The command that regenerates a stub for ``backends``, as written in its header."""
    if tuple(backends) == DEFAULT_BACKENDS:
        return "lazyops stubs"
    return f"lazyops stubs --backends {','.join(backends)}"


def header(backends: Sequence[str]) -> list[str]:
    generate = command(backends)
    return [
        f"# Generated by `{generate}` (also `python -m {generate}`) from the kernels of the backends",
        f"# {', '.join(backends)}. Do not edit: `{generate} --check` fails when this file is stale.",
    ]


def render_stub(backends: str | Iterable[str] | None = None, registry: Registry | None = None) -> str:
    """The text of ``lazyops/__init__.pyi`` declaring every kernel that ``backends`` export.

    ``backends`` defaults to the built-ins; a project that installs a third-party backend passes it too (say
    ``torch,triton,tilelang,mine``) and points its type checker at the result.
    """
    import lazyops

    chosen = parse_backends(backends)
    registry = registry or Registry.discover()
    missing = sorted(set(lazyops.__all__) - set(PUBLIC_FUNCTIONS) - set(PUBLIC_ERRORS))
    if missing:
        raise StubError(
            f"lazyops.__all__ has {', '.join(missing)}, which the stub generator does not declare; add them to "
            "PUBLIC_FUNCTIONS or PUBLIC_ERRORS in lazyops/_stubgen.py"
        )
    renderer = Renderer()
    kernels: list[str] = []
    for kernel, owner in catalogue(registry, chosen).items():
        function = factory(registry, owner, kernel)
        where = f"backend {owner!r}, {kernel}"
        signature = evaluated_signature(function, where)
        known = set(renderer.protocols)
        head = function_head(kernel, renderer.parameters(signature, where), renderer.returns(signature, where))
        # Each kernel's protocol just above its factory: the two are read together.
        for protocol in [p for p in renderer.protocols if p not in known]:
            kernels += ["", "", *protocol_definition(renderer, protocol)]
        kernels += ["", "", *definition(head, function.__doc__)]

    lines = [
        *header(chosen),
        *docstring(lazyops.__doc__, ""),
        "",
        *TYPING_IMPORTS,
        *sorted(line for line in renderer.imports if line.startswith("from ")),
        "",
        *sorted(line + "\n" for line in renderer.imports if line.startswith("import ")),
        *LAZYOPS_IMPORTS,
        "",
        "__version__: str",
        "__all__ = [",
        *(f'    "{name}",' for name in lazyops.__all__),
        "]",
    ]
    for name, head in {**PUBLIC_FUNCTIONS, **PRIVATE_FUNCTIONS}.items():
        lines += ["", "", *definition(head, getattr(lazyops, name).__doc__)]
    return "\n".join(lines + kernels) + "\n"


def protocol_definition(renderer: Renderer, protocol: type) -> list[str]:
    """A kernel's protocol, private and ``type_check_only``: it exists for checkers, not at run time."""
    where = f"{protocol.__module__}.{protocol.__qualname__}"
    call = evaluated_signature(vars(protocol)["__call__"], where)
    parameters = renderer.parameters(call, where, skip_first=True)
    head = function_head("__call__", parameters, renderer.returns(call, where), indent="    ")
    lines = ["@type_check_only", f"class {renderer.protocols[protocol]}(Protocol):"]
    lines += [*docstring(protocol.__doc__, "    "), ""]
    return lines + definition(head, vars(protocol)["__call__"].__doc__, "    ")


def function_head(name: str, parameters: list[str], returns: str, indent: str = "") -> str:
    """``def name(...) -> R:`` on one line, or one parameter a line when that would pass 120 characters."""
    head = f"def {name}({', '.join(parameters)}){returns}:"
    if len(indent + head) <= 120:
        return head
    inner = indent + "    "
    return f"def {name}(\n" + "".join(f"{inner}{part},\n" for part in parameters) + f"{indent}){returns}:"


# -- the built-in backends' manifests ------------------------------------------------------------------------------
#: The hooks lazyops calls on a backend package (see ``lazyops._registry``), as its manifest declares them for type
#: checkers when the package's ``__init__.py`` has them (a ``.pyi`` beside a module hides what it does not declare).
HOOKS = {
    "register_backend": "def register_backend() -> None: ...",
    "unavailable_reason": "def unavailable_reason() -> str | None: ...",
    "default_device": "def default_device() -> str: ...",
}


def render_manifest(package: Path, command_line: str = "lazyops stubs") -> str:
    """The ``__init__.pyi`` of a backend package: one ``from .module import name as name`` line per public
    ``*_tl`` function a kernel module (a module of the package not starting with ``_``) defines, sorted, then the
    package's hooks. Read from the files' text (``ast``): writing a manifest imports nothing."""
    kernels: list[tuple[str, str]] = []
    for path in sorted(package.glob("*.py")):
        if path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        kernels += [
            (node.name, path.stem)
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_tl") and not node.name.startswith("_")
        ]
    init = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    defined = {node.name for node in init.body if isinstance(node, ast.FunctionDef)}
    defined |= {
        alias.asname or alias.name for node in init.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    lines = [
        f"# Generated by `{command_line}` from this package's kernel modules: do not edit. lazyops reads it (without",
        "# importing anything) to know the kernels this backend exports.",
        *(f"from .{module} import {name} as {name}" for name, module in sorted(kernels, key=lambda k: (k[1], k[0]))),
    ]
    hooks = [HOOKS[name] for name in HOOKS if name in defined]
    if hooks:
        lines += ["", "# Not kernels: the package's hooks lazyops calls, declared for type checkers.", *hooks]
    return "\n".join(lines) + "\n"


def manifests(root: Path) -> dict[Path, str]:
    """Each built-in backend's manifest, by its path in the checkout at ``root``."""
    backends = root / "src" / "lazyops" / "_backends"
    return {
        backends / name / "__init__.pyi": render_manifest(backends / name)
        for name in DEFAULT_BACKENDS
        if (backends / name / "__init__.py").is_file()
    }


# -- the command ---------------------------------------------------------------------------------------------------
def source_root() -> Path | None:
    """The repository root when lazyops runs from a source checkout (``src/lazyops``), else ``None``."""
    package = Path(__file__).resolve().parent
    root = package.parent.parent
    if package.parent.name == "src" and (root / "pyproject.toml").is_file():
        return root
    return None


def targets(output: str | None) -> list[Path]:
    """The files a run writes or checks: ``--output``, or the checkout's stub (and the package's, unless a link)."""
    if output is not None:
        return [Path(output)]
    root = source_root()
    if root is None:
        raise ConfigError(
            "lazyops is installed, not run from a source checkout, so there is no default place for the stub; "
            "pass --output, e.g. --output typings/lazyops/__init__.pyi (then point mypy_path or pyright's "
            "stubPath at typings/)"
        )
    stub, package_stub = root / STUB, root / PACKAGE_STUB
    if package_stub.is_symlink() and package_stub.resolve() == stub.resolve():
        return [stub]  # the package's stub links to the checkout's: one file to write and to check
    return [stub, package_stub]


def main(check: bool = False, output: str | None = None, backends: str | Iterable[str] | None = None) -> int:
    """Write the stub (0), or with ``check`` compare it (0 when current, 1 with a diff when stale or missing).

    In a source checkout without ``--output``, the built-in backends' manifests are written (and checked) too:
    adding a kernel is its spec and one module per backend, and this command writes the rest."""
    chosen = parse_backends(backends)
    stub = render_stub(chosen)
    texts = dict.fromkeys(targets(output), stub)
    root = source_root()
    if output is None and root is not None:
        texts.update(manifests(root))
    files = list(texts)
    regenerate = command(chosen) + (f" --output {output}" if output is not None else "")
    if check:
        stale = 0
        for path in files:
            text = texts[path]
            current = path.read_text(encoding="utf-8") if path.is_file() else ""
            if current == text:
                continue
            stale += 1
            print(f"lazyops: {path} is {'stale' if path.is_file() else 'missing'}:", file=sys.stderr)
            old, new = current.splitlines(keepends=True), text.splitlines(keepends=True)
            sys.stderr.writelines(difflib.unified_diff(old, new, f"{path} (committed)", f"{path} (generated)"))
        if stale:
            print(f"lazyops: regenerate with: {regenerate}", file=sys.stderr)
            return 1
        print(f"lazyops: {', '.join(map(str, files))} up to date")
        return 0
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.read_text(encoding="utf-8") == texts[path]:
            continue  # unchanged: left as it is (its timestamp too)
        path.write_text(texts[path], encoding="utf-8")
        print(f"lazyops: wrote {path}")
    return 0
