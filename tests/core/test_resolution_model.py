"""The resolution order against an independent model, on random backend universes (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from model import BACKENDS, KERNELS, PROBES, environments, fake_namespace, model_resolve, read_attribute, universes

from lazyops import BackendError, ConfigError, KernelUnavailableError

quiet = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome_of(call) -> tuple:
    """The real namespace's answer in the model's vocabulary."""
    try:
        resolution = call()
    except KernelUnavailableError as error:
        return ("unavailable", error.available_in)
    except ConfigError:
        return ("ConfigError",)
    except AttributeError:
        return ("AttributeError",)
    return ("ok", resolution.backend, resolution.reason)


@quiet
@given(data=st.data(), universe=universes())
def test_which_agrees_with_the_model(data, universe):
    env = data.draw(environments(universe))
    namespace, _, _ = fake_namespace(universe, env)
    for kernel in data.draw(st.lists(st.sampled_from(PROBES), min_size=1, max_size=6)):
        got = outcome_of(lambda kernel=kernel: namespace.which(kernel))
        assert got == model_resolve(universe, env, kernel), (kernel, env)


def resolve_all_against_the_model(namespace, module_dict, universe, env, broken) -> None:
    """``resolve_all()``: what it returns or raises agrees with the model, and the hook goes exactly when all resolved."""
    outcomes = {kernel: model_resolve(universe, env, kernel) for kernel in sorted(universe.known)}
    try:
        unresolved = namespace.resolve_all()
    except ConfigError:
        assert all(outcome == ("ConfigError",) for outcome in outcomes.values())
        assert "__getattr__" in module_dict
        return
    except BackendError:
        assert any(o[0] == "ok" and o[1] in broken for o in outcomes.values())
        assert "__getattr__" in module_dict
        return
    assert unresolved == tuple(kernel for kernel, outcome in outcomes.items() if outcome[0] == "unavailable")
    assert ("__getattr__" in module_dict) == bool(unresolved)
    if not unresolved:
        assert set(module_dict) == universe.known  # every known kernel stored, and nothing else


@quiet
@pytest.mark.parametrize("fast", [False, True], ids=["lazy", "after-resolve_all"])
@given(data=st.data(), universe=universes())
def test_access_agrees_with_the_model_and_caches(fast, data, universe):
    """Read as CPython reads a module, before and after ``resolve_all()``: the same outcomes either way."""
    env = data.draw(environments(universe))
    namespace, module_dict, backends = fake_namespace(universe, env, hook=True)
    if fast:
        resolve_all_against_the_model(namespace, module_dict, universe, env, universe.broken)
    for kernel in data.draw(st.lists(st.sampled_from(PROBES), min_size=1, max_size=8)):
        expected = model_resolve(universe, env, kernel)
        if expected[0] == "ok" and expected[1] in universe.broken:
            with pytest.raises(BackendError):
                read_attribute(module_dict, kernel)
            assert kernel not in module_dict  # a failure is never cached: the next access tries again
            continue
        got = outcome_of(lambda kernel=kernel: _access(namespace, module_dict, kernel))
        assert got == expected, (kernel, env)
        if got[0] == "ok":
            resolved = module_dict[kernel]
            assert namespace.attribute(kernel) is resolved
            assert resolved() == (expected[1], kernel)  # it really is the chosen backend's factory
            if expected[2] == "inherited":
                assert resolved.__wrapped__ is backends[expected[1]].module[kernel]
            else:
                assert resolved is backends[expected[1]].module[kernel]  # unwrapped: the backend's own object
        else:
            assert kernel not in module_dict
    for backend in backends.values():
        assert backend.loads <= 1  # loading is idempotent


def _access(namespace, module_dict, kernel):
    """Access, then report the resolution as ``which`` would (the kernel came from where it says)."""
    read_attribute(module_dict, kernel)
    return namespace.which(kernel)


@given(universe=universes(), kernel=st.sampled_from(KERNELS))
@quiet
def test_unavailable_error_carries_kernel_backend_and_where_available(universe, kernel):
    env = {"LAZYOPS_BACKEND": universe.order[-1], "LAZYOPS_STRICT": "1"}
    namespace, _, _ = fake_namespace(universe, env)
    expected = model_resolve(universe, env, kernel)
    if expected[0] != "unavailable":
        return
    with pytest.raises(KernelUnavailableError) as caught:
        namespace.attribute(kernel)
    assert caught.value.kernel == kernel
    assert caught.value.backend == universe.order[-1]
    assert caught.value.available_in == expected[1]
    assert isinstance(caught.value, AttributeError)


class NamespaceMachine(RuleBasedStateMachine):
    """configure(), access, and backends breaking and mending, in any order, against the model."""

    @initialize(universe=universes(), data=st.data())
    def start(self, universe, data):
        self.universe = universe
        self.env = data.draw(environments(universe))
        self.overrides: dict[str, str] = {}
        self.namespace, self.module_dict, self.backends = fake_namespace(universe, self.env, hook=True)

    def model_env(self) -> dict[str, str]:
        return {**self.env, **self.overrides}

    @rule(backend=st.one_of(st.none(), st.lists(st.sampled_from([*BACKENDS, "nope"]), min_size=1, max_size=3)))
    def configure_backend(self, backend):
        self._configure("LAZYOPS_BACKEND", "backend", backend, ",".join(backend) if backend else "")

    @rule(fallback=st.lists(st.sampled_from([*KERNELS, "zeta_tl"]), max_size=2))
    def configure_fallback(self, fallback):
        self._configure("LAZYOPS_FALLBACK", "fallback", fallback, ",".join(fallback))

    @rule(strict=st.booleans())
    def configure_strict(self, strict):
        self._configure("LAZYOPS_STRICT", "strict", strict, "1" if strict else "0")

    def _configure(self, variable, argument, value, as_text):
        trial = {**self.model_env(), variable: as_text}
        from model import ModelConfigError, model_settings

        try:
            model_settings(self.universe, trial)
            valid = True
        except ModelConfigError:
            valid = False
        before = dict(self.module_dict)
        if valid:
            self.namespace.configure(**{argument: value})
            self.overrides[variable] = as_text
            assert list(self.module_dict) == ["__getattr__"]  # every cached resolution dropped, the hook back
        else:
            with pytest.raises(ConfigError):
                self.namespace.configure(**{argument: value})
            assert self.module_dict == before  # a refused configure() changes nothing

    @rule(kernel=st.sampled_from(PROBES))
    def access(self, kernel):
        expected = model_resolve(self.universe, self.model_env(), kernel)
        if expected[0] == "ok" and self.backends[expected[1]].broken:
            with pytest.raises(BackendError):
                read_attribute(self.module_dict, kernel)
            return
        got = outcome_of(lambda: _access(self.namespace, self.module_dict, kernel))
        assert got == expected

    @rule()
    def resolve_all(self):
        broken = {name for name, backend in self.backends.items() if backend.broken}
        resolve_all_against_the_model(self.namespace, self.module_dict, self.universe, self.model_env(), broken)

    @rule(backend=st.sampled_from(BACKENDS))
    def toggle_broken(self, backend):
        if backend in self.backends and self.backends[backend].module is None:
            self.backends[backend].broken = not self.backends[backend].broken

    @invariant()
    def the_hook_goes_only_when_every_kernel_is_stored(self):
        if hasattr(self, "module_dict") and "__getattr__" not in self.module_dict:
            assert set(self.module_dict) == self.universe.known

    @invariant()
    def loads_at_most_once(self):
        if hasattr(self, "backends"):
            assert all(b.loads <= 1 for b in self.backends.values())


NamespaceMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=25, deadline=None)
test_namespace_state_machine = NamespaceMachine.TestCase


# -- one configuration: declines and plans ---------------------------------------------------------------------------
class _PureUniverse:
    """The ``_resolve.Universe`` of a model universe, for the pure order (no namespace, no fake imports)."""

    def __init__(self, universe) -> None:
        self.universe = universe

    @property
    def backends(self):
        return tuple(self.universe.order)

    @property
    def default(self):
        return self.universe.default

    def exports(self, backend):
        return self.universe.exports[backend]

    def known_kernels(self):
        return self.universe.known


@quiet
@given(data=st.data(), universe=universes())
def test_resolving_a_configuration_agrees_with_the_model(data, universe):
    """The order with declines and a plan, on random universes: ``_resolve.resolve(..., serves, planned)`` against
    ``model_resolve_config``, which is written from the contract's text."""
    from model import CONFIGS, declines, model_resolve_config, plans

    from lazyops._resolve import resolve, validate
    from lazyops._settings import Settings, settings_from_environment

    env = data.draw(environments(universe))
    declined, plan = data.draw(declines(universe)), data.draw(plans(universe))
    pure = _PureUniverse(universe)
    for kernel in data.draw(st.lists(st.sampled_from(PROBES), min_size=1, max_size=4)):
        config = data.draw(st.sampled_from(CONFIGS))
        asked: list[str] = []

        def serves(backend, kernel=kernel, config=config, asked=asked):
            asked.append(backend)
            return "declined in the model" if (kernel, config) in declined[backend] else None

        def real(kernel=kernel, config=config, serves=serves):
            if kernel.startswith("_") or kernel not in pure.known_kernels():
                return resolve(kernel, Settings(), pure)  # names are refused before the settings are read
            settings = settings_from_environment(env)
            validate(settings, pure)
            return resolve(kernel, settings, pure, serves=serves, planned=plan.get((kernel, config)), label=config)

        got = outcome_of(real)
        assert got == model_resolve_config(universe, env, kernel, config, declined, plan), (kernel, config, env)
        assert len(asked) == len(set(asked)), f"a backend was asked twice: {asked}"
