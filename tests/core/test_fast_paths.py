"""The first access's fast paths give what the general code gives (issue 12, "The namespace").

Each fast path stands in for a general one (the stub regex for ``ast``, the direct entry-point reader for
``importlib.metadata``, the summary from the lacking kernels for the full report, ``Settings`` for a frozen
dataclass); these tests hold them to the same answers, errors included.
"""

from __future__ import annotations

import copy
import pickle
import sys

import pytest

from lazyops._config import Settings
from lazyops._errors import KernelUnavailableError
from lazyops._manifest import _read_simple, _read_with_ast, read_manifest
from lazyops._namespace import Namespace
from lazyops._notices import summary_line
from lazyops._registry import (
    _entry_points_from_directories,
    _entry_points_from_metadata,
    installed_entry_points,
)
from lazyops._report import build_report

STUBS = [
    "from .a import a_tl as a_tl\nfrom .b import b_tl as b_tl\n",
    "# a comment\n\nfrom .a import a_tl as a_tl  # trailing\n   # indented comment\n",
    "from .a import a_tl as a_tl",  # no final newline
    "from .a.b import c_tl as d_tl\nfrom .e import f as f_tl\nfrom .g import _h_tl\nfrom .i import j\n",
    "from .a import a_tl as a_tl\r\nfrom .b import b_tl as b_tl\r\n",
    "def unavailable_reason() -> str | None: ...\ndef flag() -> bool: ...\nfrom .a import a_tl as a_tl\n",
    "def f() -> None.x | True: ...\n",
    "from .a import match_tl as match_tl\nfrom .type import type_tl\n",  # soft keywords are names
    "from .a import x\nfrom .b import x\nfrom .c import c_tl\n",  # a repeated name that is no kernel
    "from .a import _a_tl\nfrom .b import _a_tl\n",
    # What the fast reader leaves to ast:
    "from .a import a_tl as a_tl\nfrom .b import a_tl as a_tl\n",  # exported twice
    "from .a import a_tl, b_tl\n",
    '"""A docstring."""\nfrom .a import a_tl as a_tl\n',
    "from .a import (\n    a_tl as a_tl,\n)\n",
    "x = 1\nfrom .a import a_tl\n",
    "from .class import a_tl as a_tl\n",
    "from .a import a_tl as None\n",
    "from .None import a_tl\n",
    "def None() -> str: ...\n",
    "def f() -> x.None: ...\n",
    "def f() -> a.class: ...\n",
    "def f() -> a | class: ...\n",
    "from .a.class import b_tl\n",
    "from a import a_tl\n",
    "from . import a_tl\n",
    "  from .a import a_tl\n",
    "from .a import a_tl as a_tl\nfrom .a import\n",
    "from .ä import a_tl as a_tl\n",
]


def outcome(read, *args):
    try:
        return read(*args)
    except Exception as error:  # noqa: BLE001 - the error is the outcome compared
        return (type(error), str(error))


@pytest.mark.parametrize("text", STUBS)
def test_the_stub_regex_agrees_with_ast_or_leaves_the_stub_to_it(text, tmp_path):
    stub = tmp_path / "__init__.pyi"
    stub.write_bytes(text.encode())
    expected = outcome(_read_with_ast, str(stub), stub.read_text(encoding="utf-8"))
    fast = _read_simple(stub.read_text(encoding="utf-8"))
    assert fast is None or fast == expected
    assert outcome(read_manifest, str(stub)) == expected


def specs_of(specs):
    return [(spec.name, spec.value, spec.distribution) for spec in specs]


def test_entry_points_read_directly_are_importlib_metadatas(fake_backends, tmp_path, monkeypatch):
    fake_backends.make("ext", ["alpha_tl"])
    fake_backends.make("other", ["beta_tl"], distribution="Other.Dist")
    # A second copy of fake-ext later on sys.path: hidden by the first, as importlib.metadata hides it.
    later = tmp_path / "later"
    dist_info = later / "fake_ext-2.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-ext\nVersion: 2.0\n")
    (dist_info / "entry_points.txt").write_text("[lazyops.backends]\nshadowed = nowhere.module\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(later)])
    direct = _entry_points_from_directories()
    assert direct is not None
    assert specs_of(direct) == specs_of(_entry_points_from_metadata())
    assert {"ext", "other"} <= {name for name, _, _ in specs_of(direct)}
    assert "shadowed" not in {name for name, _, _ in specs_of(direct)}


def test_entry_points_go_to_importlib_metadata_for_a_zip_on_sys_path(tmp_path, monkeypatch):
    archive = tmp_path / "packages.zip"
    archive.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip archive
    monkeypatch.setattr(sys, "path", [*sys.path, str(archive)])
    assert _entry_points_from_directories() is None
    assert specs_of(installed_entry_points()) == specs_of(_entry_points_from_metadata())


def test_settings_behave_as_the_frozen_dataclass_they_replace():
    settings = Settings(chain=("triton",), fallback=frozenset({"rope_tl"}))
    same_value = Settings(chain=("triton",), fallback=frozenset({"rope_tl"}), origin={"backend": "elsewhere"})
    assert settings == same_value and hash(settings) == hash(same_value)  # origin is not part of the value
    assert settings != settings.replace(strict=True)
    assert repr(settings) == (
        "Settings(chain=('triton',), fallback=frozenset({'rope_tl'}), strict=False, verbose=False, trace=None, "
        "trace_args=False, rank=0)"
    )
    with pytest.raises(AttributeError):
        settings.strict = True  # type: ignore[misc]
    changed = settings.replace(strict=True, origin={"strict": "configure(strict=...)"})
    assert changed.strict and changed.origin["strict"] == "configure(strict=...)"
    assert changed.origin["backend"] == "LAZYOPS_BACKEND"
    with pytest.raises(TypeError):
        settings.replace(colour="blue")
    for clone in (pickle.loads(pickle.dumps(changed)), copy.copy(changed), copy.deepcopy(changed)):
        assert clone == changed and dict(clone.origin) == dict(changed.origin)


@pytest.mark.parametrize(
    "environ",
    [
        {"LAZYOPS_BACKEND": "ext"},
        {"LAZYOPS_BACKEND": "ext", "LAZYOPS_VERBOSE": "1"},
        {"LAZYOPS_BACKEND": "ext", "LAZYOPS_STRICT": "1"},
        {"LAZYOPS_BACKEND": "ext,other"},
        {"LAZYOPS_BACKEND": "other", "LAZYOPS_STRICT": "1"},
        {"LAZYOPS_BACKEND": "torch"},
        {},
    ],
)
def test_the_first_access_summary_is_the_reports(fake_backends, environ):
    fake_backends.make("ext", ["alpha_tl", "rmsnorm_tl"])
    fake_backends.make("other", ["alpha_tl", "beta_tl", "softmax_tl"])
    namespace = Namespace({}, environ=environ, default=lambda: "torch")
    settings, universe = namespace.settings(), namespace.universe()
    assert summary_line(settings, universe) == build_report(settings, universe).summary_line()


def test_a_kernel_of_the_platform_default_resolves_without_reading_entry_points(fake_backends, monkeypatch):
    fake_backends.make("ext", ["alpha_tl", "rmsnorm_tl"])
    reads = []

    def counted():
        reads.append(1)
        return installed_entry_points()

    monkeypatch.setattr("lazyops._registry.installed_entry_points", counted)
    namespace = Namespace({}, environ={}, default=lambda: "torch")
    assert (namespace.which("rmsnorm_tl").backend, reads) == ("torch", [])  # a built-in answers: nothing read
    with pytest.raises(KernelUnavailableError):  # known only past the built-ins: the entry points are read
        namespace.which("alpha_tl")
    assert reads == [1] and "ext" in namespace.backend_names()
    registry = namespace.universe().registry
    assert [backend.name for backend in registry][:3] == ["torch", "triton", "tilelang"]
    assert registry["ext"] is next(backend for backend in registry if backend.name == "ext")  # one object each
    assert reads == [1]
