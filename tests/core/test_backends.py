"""Discovery and loading of real backend packages: stubs, entry points, register hooks, rollback, errors."""

from __future__ import annotations

import sys

import pytest

from lazyops._errors import BackendError
from lazyops._namespace import Namespace
from lazyops._registry import Backend, Registry, installed_entry_points


def namespace_for(env=None) -> tuple[Namespace, dict]:
    module_dict: dict = {}
    return Namespace(module_dict, environ=env or {}, default=lambda: "torch"), module_dict


def test_entry_point_backend_is_discovered_and_selected(fake_backends):
    fake_backends.make("ext", ["alpha_tl", "rmsnorm_tl"])
    assert ("ext", "lazyops_fake_ext", "fake-ext") in installed_entry_points()
    namespace, module_dict = namespace_for({"LAZYOPS_BACKEND": "ext"})
    assert namespace.backend_names()[:3] == ("torch", "triton", "tilelang")
    assert "ext" in namespace.backend_names()
    assert "alpha_tl" in namespace.kernel_names()
    factory = namespace.attribute("rmsnorm_tl")
    assert factory() == ("ext", "rmsnorm_tl", (), {})
    assert module_dict["rmsnorm_tl"] is sys.modules["lazyops_fake_ext.rmsnorm"].rmsnorm_tl


def test_stub_lists_kernels_without_importing_the_backend(fake_backends):
    package = fake_backends.make("ext", ["alpha_tl", "beta_tl"])
    namespace, _ = namespace_for({"LAZYOPS_BACKEND": "ext"})
    assert {"alpha_tl", "beta_tl"} <= set(namespace.kernel_names())
    assert package not in sys.modules
    namespace.attribute("alpha_tl")
    assert f"{package}.alpha" in sys.modules
    assert f"{package}.beta" not in sys.modules  # the first access imports that kernel's module only


def test_stubless_backend_is_imported_to_list_its_public_kernels(fake_backends):
    package = fake_backends.make("plain", ["alpha_tl", "_hidden_tl"], stub=False)
    namespace, _ = namespace_for({"LAZYOPS_BACKEND": "plain"})
    assert "alpha_tl" in namespace.kernel_names()
    assert "_hidden_tl" not in namespace.kernel_names()
    assert package in sys.modules
    assert namespace.attribute("alpha_tl")() == ("plain", "alpha_tl", (), {})


def test_a_name_exported_twice_names_both_places(fake_backends):
    package = fake_backends.make("dup", ["alpha_tl"])
    stub = fake_backends.root / package / "__init__.pyi"
    stub.write_text(stub.read_text() + "from .other import alpha_tl as alpha_tl\n")
    backend = Backend("dup", package, "fake-dup", "reinstall")
    with pytest.raises(BackendError) as caught:
        backend.exports()
    message = str(caught.value)
    assert "'alpha_tl' twice" in message and "from .alpha (line 1)" in message and "from .other (line 2)" in message


def test_register_hook_runs_once_and_a_failing_one_rolls_back(fake_backends, tmp_path):
    flag = tmp_path / "fail"
    flag.write_text("")
    counter = tmp_path / "count"
    init = f"""
    import pathlib
    def register_backend():
        pathlib.Path({str(counter)!r}).open("a").write("x")
        if pathlib.Path({str(flag)!r}).exists():
            raise RuntimeError("registration refused")
    """
    package = fake_backends.make("hooked", ["alpha_tl"], init_code=init)
    namespace, module_dict = namespace_for({"LAZYOPS_BACKEND": "hooked"})
    with pytest.raises(BackendError) as caught:
        namespace.attribute("alpha_tl")
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert "registration refused" in str(caught.value)
    assert package not in sys.modules and not any(m.startswith(package + ".") for m in sys.modules)
    assert "alpha_tl" not in module_dict
    flag.unlink()
    assert namespace.attribute("alpha_tl")() == ("hooked", "alpha_tl", (), {})  # the next access tries again
    namespace.attribute("alpha_tl")
    namespace.universe().registry["hooked"].load()
    assert counter.read_text() == "xx"  # once for the failed load, once for the good one; never again


def test_missing_backend_package_says_what_to_install(fake_backends):
    fake_backends.register("ghost", "lazyops_ghost_backend", "ghost-dist")
    namespace, _ = namespace_for({"LAZYOPS_BACKEND": "ghost"})
    with pytest.raises(BackendError) as caught:
        namespace.backend_names() and namespace.universe().registry["ghost"].exports()
    assert caught.value.missing
    assert "not installed" in str(caught.value) and "reinstall ghost-dist" in str(caught.value)


def test_missing_dependency_of_a_backend_is_named(fake_backends):
    fake_backends.make("needy", ["alpha_tl"], kernel_code="import lazyops_no_such_dependency")
    namespace, _ = namespace_for({"LAZYOPS_BACKEND": "needy"})
    with pytest.raises(BackendError) as caught:
        namespace.attribute("alpha_tl")
    assert caught.value.missing
    assert "needs the package 'lazyops_no_such_dependency'" in str(caught.value)


def test_failing_import_is_chained_and_the_namespace_recovers_after_configure(fake_backends):
    fake_backends.make("crashy", ["rmsnorm_tl"], kernel_code="raise ZeroDivisionError('boom at import')")
    namespace, _ = namespace_for({"LAZYOPS_BACKEND": "crashy"})
    with pytest.raises(BackendError) as caught:
        namespace.attribute("rmsnorm_tl")
    assert not caught.value.missing
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    assert "importing backend 'crashy'" in str(caught.value) and "boom at import" in str(caught.value)
    namespace.configure(backend="torch")
    assert namespace.attribute("rmsnorm_tl").__module__ == "lazyops._backends.torch.rmsnorm"


def test_two_distributions_claiming_one_name_are_both_refused_naming_both():
    specs = [("ext", "a.backend", "dist-a"), ("ext", "b.backend", "dist-b")]
    registry = Registry.discover(specs)
    with pytest.raises(BackendError, match="claimed twice: by dist-a and dist-b"):
        registry["ext"].exports()
    assert [refused.name for refused in registry.refused] == ["ext"]


def test_a_third_party_claiming_a_builtin_name_is_refused_and_the_builtin_stays():
    registry = Registry.discover([("torch", "rogue.backend", "rogue")])
    assert registry["torch"].module_name == "lazyops._backends.torch"
    (refused,) = registry.refused
    assert "claimed by built-in and by rogue" in refused.reason and "the built-in stays in use" in refused.reason


@pytest.mark.parametrize(
    "entry_point, message",
    [
        (("Bad-Name", "x.y", "d"), "lowercase letters"),
        (("ok", "x.y:attr", "d"), "module path"),
    ],
)
def test_malformed_entry_points_are_refused_on_use(entry_point, message):
    registry = Registry.discover([entry_point])
    name = entry_point[0]
    with pytest.raises(BackendError, match=message):
        registry[name].load()
    assert [refused.name for refused in registry.refused] == [name]


def test_environment_selects_registered_names_only_never_module_paths(fake_backends):
    package = fake_backends.make("ext", ["alpha_tl"], register=False)
    namespace, _ = namespace_for({"LAZYOPS_BACKEND": package})
    from lazyops import ConfigError

    with pytest.raises(ConfigError, match="not registered"):
        namespace.attribute("rmsnorm_tl")
    assert package not in sys.modules


def test_import_lazyops_backend_gives_the_backend_module(fake_backends):
    import importlib

    import lazyops

    torch_backend = importlib.import_module("lazyops.torch")
    assert torch_backend is sys.modules["lazyops._backends.torch"]
    assert torch_backend.__spec__.name == "lazyops._backends.torch"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("lazyops.no_such_backend")
    assert lazyops.torch is torch_backend


def test_builtin_backend_that_cannot_run_here_says_so_with_the_way_out(monkeypatch):
    pytest.importorskip("triton")
    import lazyops._backends.triton as triton_backend

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr("lazyops._backends.has_cuda_device", lambda: False)
    if triton_backend.unavailable_reason() is None:
        pytest.skip("a GPU is present: Triton can run here")
    namespace, _ = namespace_for({"LAZYOPS_BACKEND": "triton"})
    with pytest.raises(BackendError) as caught:
        namespace.attribute("softmax_tl")
    assert "backend 'triton' cannot run here" in str(caught.value)
    assert "TRITON_INTERPRET=1" in str(caught.value) and "'torch'" in str(caught.value)
