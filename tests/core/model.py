"""An independent model of the resolution order in docs/design.md, and fake backends to run the real namespace on.

The model is written from the contract's text, not from ``lazyops._resolve``: the tests compare the two on random
universes, so a mistake would have to be made twice, the same way, to pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from lazyops._errors import BackendError

KERNELS = ["alpha_tl", "beta_tl", "gamma_tl", "delta_tl", "eps_tl"]
PROBES = [*KERNELS, "_private", "__wrapped__", "zeta_tl", "alpah_tl"]
BACKENDS = ["torch", "triton", "tilelang", "ext", "vendor"]
BOOLEAN_TEXTS = ["", "0", "1", "true", "False", "YES", "off", "On", "2", "maybe"]


@dataclass
class ModelUniverse:
    order: list[str]  # registered backends, the reference ("torch") first
    exports: dict[str, frozenset[str]]
    default: str
    broken: set[str] = field(default_factory=set)  # backends whose import fails

    @property
    def known(self) -> frozenset[str]:
        return frozenset().union(*self.exports.values())


@st.composite
def universes(draw) -> ModelUniverse:
    others = draw(st.lists(st.sampled_from(BACKENDS[1:]), unique=True, min_size=2, max_size=4))
    order = ["torch", *others]
    # The reference usually has most kernels, others fewer: the shape of a real install, and it makes every
    # rule of the order (inherited from the default vs. from the reference especially) come up often.
    exports = {b: frozenset(k for k in KERNELS if draw(st.integers(0, 9)) < (8 if b == "torch" else 5)) for b in order}
    default = draw(st.sampled_from(others + others + ["torch"]))
    broken = {b for b in order if draw(st.integers(0, 9)) == 0}
    return ModelUniverse(order, exports, default, broken)


def name_lists(valid: list[str], invalid: list[str]):
    """Comma lists as a user might type them: mostly well-formed, sometimes repeated, empty or misspelt."""
    well_formed = st.lists(st.sampled_from(valid), unique=True, min_size=1, max_size=3).map(",".join)
    anything = st.lists(st.sampled_from(valid + invalid + [""]), max_size=3).map(",".join)
    return st.one_of(st.none(), well_formed, well_formed, well_formed, anything)


def environments(universe: ModelUniverse):
    return st.fixed_dictionaries(
        {
            "LAZYOPS_BACKEND": st.one_of(
                name_lists(universe.order, ["trtion", *BACKENDS]),
                # a chain without the default, where "inherited from the default" and "from the reference" differ
                name_lists([b for b in universe.order if b not in (universe.default, "torch")] or ["torch"], []),
            ),
            "LAZYOPS_FALLBACK": st.one_of(st.none(), name_lists(KERNELS, ["zeta_tl"])),
            "LAZYOPS_STRICT": st.one_of(st.none(), st.sampled_from(["0", "1", "1"]), st.sampled_from(BOOLEAN_TEXTS)),
        },
    ).map(lambda env: {k: v for k, v in env.items() if v is not None})


# -- the model -----------------------------------------------------------------------------------------------------
class ModelConfigError(Exception):
    pass


def model_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ModelConfigError(text)


def model_list(text: str | None) -> list[str] | None:
    if text is None or not text.strip():
        return None
    items = [item.strip() for item in text.split(",")]
    if "" in items or len(set(items)) != len(items):
        raise ModelConfigError(text)
    return items


def model_settings(universe: ModelUniverse, env: dict[str, str]) -> tuple[list[str] | None, set[str], bool]:
    """(chain or None, fallback set, strict), or ``ModelConfigError``."""
    chain = model_list(env.get("LAZYOPS_BACKEND"))
    fallback = set(model_list(env.get("LAZYOPS_FALLBACK")) or [])
    strict = model_bool(env.get("LAZYOPS_STRICT", ""))
    if chain is not None and any(b not in universe.order for b in chain):
        raise ModelConfigError("unknown backend")
    if fallback and strict:
        raise ModelConfigError("strict with fallback")
    effective = chain if chain is not None else [universe.default]
    for kernel in fallback:
        if kernel not in universe.known:
            raise ModelConfigError("unknown fallback kernel")
        if not any(kernel in universe.exports[b] for b in effective):
            raise ModelConfigError("nothing to fall back from")
        if kernel not in universe.exports[universe.default]:
            raise ModelConfigError("default lacks it")
    return chain, fallback, strict


def model_resolve(universe: ModelUniverse, env: dict[str, str], kernel: str) -> tuple:
    """("ok", backend, reason) | ("AttributeError",) | ("ConfigError",) | ("unavailable", available_in)."""
    if kernel.startswith("_") or kernel not in universe.known:
        return ("AttributeError",)
    try:
        chain, fallback, strict = model_settings(universe, env)
    except ModelConfigError:
        return ("ConfigError",)
    effective = chain if chain is not None else [universe.default]
    if kernel in fallback:
        return ("ok", universe.default, "fallback-list")
    for backend in effective:
        if kernel in universe.exports[backend]:
            return ("ok", backend, "selected")
    if not strict:
        if kernel in universe.exports[universe.default]:
            return ("ok", universe.default, "inherited")
        if kernel in universe.exports["torch"]:
            return ("ok", "torch", "inherited")
    return ("unavailable", tuple(b for b in universe.order if kernel in universe.exports[b]))


# -- fake backends for the real namespace -----------------------------------------------------------------------
class FakeBackend:
    """Duck-types ``lazyops._registry.Backend``: exports from a set, kernels are fresh functions, loads counted."""

    def __init__(self, name: str, exports: frozenset[str], broken: bool = False) -> None:
        self.name = name
        self._exports = exports
        self.broken = broken
        self.loads = 0
        self.module = None

    def exports(self) -> frozenset[str]:
        return self._exports

    def manifest(self) -> dict:
        return {kernel: (None, kernel) for kernel in self._exports}

    def load(self):
        if self.module is None:
            if self.broken:
                raise BackendError(f"backend {self.name!r} is broken (fake)", backend=self.name)
            self.loads += 1
            self.module = {kernel: _factory(self.name, kernel) for kernel in self._exports}
        return self.module

    def unavailable_reason(self):
        return None

    def kernel(self, kernel: str):
        return self.load()[kernel]


def _factory(backend: str, kernel: str):
    def factory(*args, **kwargs):
        return (backend, kernel)

    factory.__name__ = kernel
    factory.__doc__ = f"{kernel} from {backend}"
    factory.origin = backend
    return factory


def fake_namespace(universe: ModelUniverse, env: dict[str, str], *, hook: bool = False):
    """A real ``Namespace`` over fake backends, storing kernels in a dict of its own.

    With ``hook``, the dict starts with a ``__getattr__`` as lazyops' module has one (``_``-names refused, the rest
    to ``Namespace.attribute``), which ``resolve_all()`` may take out; read it with ``read_attribute``.
    """
    from lazyops._namespace import Namespace
    from lazyops._registry import Registry

    backends = [FakeBackend(b, universe.exports[b], b in universe.broken) for b in universe.order]
    module_dict: dict = {}
    namespace = Namespace(
        module_dict, environ=env, discover=lambda: Registry(backends), default=lambda: universe.default
    )
    if hook:

        def __getattr__(name: str):
            if name.startswith("_"):
                raise AttributeError(f"module 'fake' has no attribute {name!r}", name=name, obj=None)
            return namespace.attribute(name)

        module_dict["__getattr__"] = __getattr__
    return namespace, module_dict, {b.name: b for b in backends}


def read_attribute(module_dict: dict, name: str):
    """``module.name`` as CPython reads a module: its dict, else the dict's ``__getattr__``, else AttributeError."""
    if name in module_dict:
        return module_dict[name]
    if "__getattr__" in module_dict:
        return module_dict["__getattr__"](name)
    raise AttributeError(f"module 'fake' has no attribute {name!r}", name=name, obj=None)


# -- configurations: declines and plans ------------------------------------------------------------------------------
#: Configurations of a kernel, as the model sees them: a few labels (the real ones are bound factory arguments).
CONFIGS = ["c0", "c1", "c2"]


@st.composite
def declines(draw, universe: ModelUniverse) -> dict[str, frozenset[tuple[str, str]]]:
    """For each backend, the (kernel, configuration) pairs it declines: often none, sometimes a few."""
    return {
        backend: frozenset(
            (kernel, config)
            for kernel in universe.exports[backend]
            for config in CONFIGS
            if draw(st.integers(0, 9)) < 3
        )
        for backend in universe.order
    }


@st.composite
def plans(draw, universe: ModelUniverse) -> dict[tuple[str, str], str]:
    """A plan: the backend named for some (kernel, configuration) pairs, any installed backend (it may not serve)."""
    return {
        (kernel, config): draw(st.sampled_from(universe.order))
        for kernel in KERNELS
        for config in CONFIGS
        if draw(st.integers(0, 9)) < 3
    }


def model_resolve_config(
    universe: ModelUniverse,
    env: dict[str, str],
    kernel: str,
    config: str,
    declined: dict[str, frozenset[tuple[str, str]]],
    plan: dict[tuple[str, str], str],
) -> tuple:
    """The order of docs/design.md for one configuration, from the text: a backend serves a configuration when it
    exports the kernel and does not decline it; the plan's backend comes first where it serves (in strict mode, only
    from within the chain); otherwise the order goes on as if a decliner lacked the kernel, and the reason is
    "declined" when a backend asked before the chosen one declined."""
    if kernel.startswith("_") or kernel not in universe.known:
        return ("AttributeError",)
    try:
        chain, fallback, strict = model_settings(universe, env)
    except ModelConfigError:
        return ("ConfigError",)
    effective = chain if chain is not None else [universe.default]
    sources = [universe.default] if universe.default == "torch" else [universe.default, "torch"]
    asked: list[str] = []

    def serves(backend: str) -> bool:
        return kernel in universe.exports[backend] and (kernel, config) not in declined[backend]

    def chosen(backend: str, reason: str) -> tuple:
        declined_before = any(kernel in universe.exports[b] and not serves(b) for b in asked)
        return ("ok", backend, "declined" if declined_before and reason != "plan" else reason)

    planned = plan.get((kernel, config))
    if planned is not None and (not strict or planned in effective):
        if serves(planned):
            return chosen(planned, "plan")
        asked.append(planned)
    if kernel in fallback:
        phases = [(sources, "fallback-list")]
    else:
        phases = [(effective, "selected")] + ([] if strict else [(sources, "inherited")])
    for backends, reason in phases:
        for backend in backends:
            if serves(backend):
                return chosen(backend, reason)
            asked.append(backend)
    return ("unavailable", tuple(b for b in universe.order if kernel in universe.exports[b]))
