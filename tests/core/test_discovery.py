"""Discovery from what is installed: stubs and entry points, read afresh by every process and never from elsewhere.

lazyops keeps no record between processes (docs/decisions/001-no-disk-cache.md), so what the files say now is what
runs, and nothing outside the installed distributions and the backend packages can change it (issue 27.12). A
backend may not take a name of lazyops' own (27.15); one distribution's unreadable metadata does not stop the
others (27.16).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import lazyops
from fresh_interpreter import run_python
from lazyops._errors import BackendError
from lazyops._registry import ManifestError, Registry, read_manifest, reserved_names


def rewrite_in_place(path: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` (as long) in the same inode, then put size and timestamps back as they were: what
    ``cp -p``, ``rsync -t --inplace`` or an archive unpacked over an old install leave."""
    assert len(old) == len(new)
    before = path.stat()
    text = path.read_text()
    assert old in text
    with path.open("r+") as file:
        file.write(text.replace(old, new))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def date_back(root: Path) -> None:
    """Date every file an hour back, as an installed package's are."""
    then = int((os.path.getmtime(root) - 3600) * 1e9)
    for path in [*sorted(root.rglob("*"), reverse=True), root]:
        os.utime(path, ns=(then, then))


def private_env(fake_backends, tmp_path: Path, **variables: str) -> dict[str, str]:
    """An environment whose home and cache folders are empty folders of this test."""
    home, cache = tmp_path / "home", tmp_path / "xdg-cache"
    home.mkdir(exist_ok=True)
    return fake_backends.env(HOME=str(home), XDG_CACHE_HOME=str(cache), **variables)


def kernels_and_backends(env: dict[str, str]) -> dict:
    result = run_python("import json, lazyops; print(json.dumps([lazyops.kernels(), lazyops.backends()]))", env)
    assert result.returncode == 0, result.stderr
    kernels, backends = json.loads(result.stdout)
    return {"kernels": kernels, "backends": backends}


# -- 27.12: what is on disk now is what runs -------------------------------------------------------------------
def test_a_stub_rewritten_in_place_with_its_old_size_and_time_is_seen_by_the_next_process(fake_backends, tmp_path):
    package = fake_backends.make("ext", ["alpha_tl"])
    date_back(fake_backends.root)
    env = private_env(fake_backends, tmp_path)
    assert "alpha_tl" in kernels_and_backends(env)["kernels"]
    assert "alpha_tl" in kernels_and_backends(env)["kernels"]  # a second process, had the first left a record
    rewrite_in_place(fake_backends.root / package / "__init__.pyi", "alpha", "gamma")
    kernels = kernels_and_backends(env)["kernels"]
    assert "gamma_tl" in kernels and "alpha_tl" not in kernels


def test_an_entry_point_rewritten_in_place_with_its_old_size_and_time_is_seen_by_the_next_process(
    fake_backends, tmp_path
):
    fake_backends.make("one", ["alpha_tl"], distribution="fake-one")
    date_back(fake_backends.root)
    env = private_env(fake_backends, tmp_path)
    assert "one" in kernels_and_backends(env)["backends"]
    assert "one" in kernels_and_backends(env)["backends"]
    rewrite_in_place(fake_backends.root / "fake_one-1.0.dist-info" / "entry_points.txt", "one =", "uno =")
    backends = kernels_and_backends(env)["backends"]
    assert "uno" in backends and "one" not in backends


AUDITED = """
import json, os, sys
import torch  # before the audit: only what lazyops does is recorded

# Every file opened, and every change to the file system, while lazyops discovers, resolves and loads.
WRITES = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link", "os.truncate", "os.chmod",
          "os.chown", "os.utime", "os.setxattr"}
events = []

def audit(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        events.append(["open", os.fsdecode(args[0]), args[1], args[2]])
    elif event in WRITES:
        events.append([event, os.fsdecode(args[0]), None, None])

sys.addaudithook(audit)
import lazyops
lazyops.rmsnorm_tl
lazyops.which("alpha_tl"), lazyops.kernels(), lazyops.backends(), dir(lazyops)
unresolved = lazyops.resolve_all()
import lazyops.ext
audit = None  # the hook stays installed; nothing after this line is lazyops' work
print(json.dumps({"events": events, "path": sys.path, "cwd": os.getcwd(), "unresolved": list(unresolved)}))
"""


def test_resolution_reads_only_the_installed_distributions_and_writes_nothing(fake_backends, tmp_path):
    """No file outside ``sys.path`` (the distributions' metadata, the backend packages) is read, so no folder that
    anyone can write to decides which code runs; and nothing is created, renamed or written anywhere."""
    fake_backends.make("ext", ["alpha_tl", "rmsnorm_tl"])
    fake_backends.make("plain", ["beta_tl"], stub=False)
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    # LAZYOPS_CACHE_DIR was an older lazyops' cache folder: nothing may be kept there (or in a literal '~' folder)
    # Strict, with torch in the chain: no platform default (a GPU machine's would import TileLang, whose own files
    # are not lazyops' doing)
    chain = {"LAZYOPS_BACKEND": "ext,plain,torch", "LAZYOPS_STRICT": "1"}
    env = private_env(fake_backends, tmp_path, LAZYOPS_CACHE_DIR="~/lazyops-cache", **chain)
    result = run_python(f"import os; os.chdir({str(workdir)!r})\n" + AUDITED, env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["unresolved"] == []
    roots = [os.path.realpath(entry or report["cwd"]) for entry in report["path"]]
    opened = [event for event in report["events"] if event[0] == "open"]
    assert any(path.endswith("entry_points.txt") for _, path, _, _ in opened)  # the audit does see discovery
    outside = [path for _, path, _, _ in opened if not _under(os.path.realpath(path), roots)]
    assert outside == []
    assert [event for event in report["events"] if event[0] != "open"] == []
    assert all(mode == "r" and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) == 0 for _, _, mode, flags in opened)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def test_lazyops_creates_no_folder(fake_backends, tmp_path):
    fake_backends.make("ext", ["alpha_tl"])
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    chain = {"LAZYOPS_BACKEND": "ext,torch", "LAZYOPS_STRICT": "1"}  # no platform default: see above
    env = private_env(fake_backends, tmp_path, LAZYOPS_CACHE_DIR="~/lazyops-cache", EAGER_IMPORT="1", **chain)
    code = f"import os; os.chdir({str(workdir)!r}); import lazyops; lazyops.kernels(); lazyops.rmsnorm_tl"
    result = run_python(code, env)
    assert result.returncode == 0, result.stderr
    assert list(workdir.iterdir()) == []  # no literal '~' folder, nothing else
    assert list(Path(env["HOME"]).iterdir()) == []
    assert not Path(env["XDG_CACHE_HOME"]).exists()


# -- 27.15: names a backend may not take -------------------------------------------------------------------------
def test_reserved_names_are_lazyops_own_public_names_and_submodules():
    reserved = reserved_names()
    assert set(lazyops.__all__) <= reserved
    assert {"configure", "which", "kernels", "backends", "resolve_all"} <= reserved
    assert {"testing", "specs", "cli", "pytest_plugin"} <= reserved
    assert not {"torch", "triton", "tilelang", "ext"} & reserved


def test_reserved_names_survive_another_thread_setting_package_attributes_meanwhile(monkeypatch):
    # seen under load (2026-12-07): configure() racing 64 first accesses raised "dictionary changed size during
    # iteration", the package's dict gaining a submodule or a kernel while reserved_names() read it. The thread
    # switch is made deterministic: the check of each value sets a new attribute, as another thread would.
    from lazyops import _registry

    added = []

    def callable_while_another_thread_writes(value):
        name = f"_written_meanwhile_{len(added)}"
        added.append(name)
        monkeypatch.setattr(lazyops, name, object(), raising=False)
        return callable(value)

    monkeypatch.setattr(_registry, "callable", callable_while_another_thread_writes, raising=False)
    reserved = reserved_names()
    assert added and {"configure", "which"} <= reserved


def test_a_new_submodule_is_reserved_without_a_list_to_keep(tmp_path, monkeypatch):
    (tmp_path / "newcomer.py").write_text("raise RuntimeError('found without importing it')\n")
    monkeypatch.setattr(lazyops, "__path__", [*lazyops.__path__, str(tmp_path)])
    assert "newcomer" in reserved_names()
    assert "lazyops.newcomer" not in sys.modules


@pytest.mark.parametrize("name", ["kernels", "configure", "which", "testing", "specs"])
def test_an_entry_point_named_after_lazyops_own_name_is_refused(name):
    registry = Registry.discover([(name, "their.backend", "their-dist")])
    (refusal,) = registry.refused
    assert f"lazyops.{name} is lazyops' own" in refusal.reason and "rename the entry point" in refusal.reason
    with pytest.raises(BackendError, match=f"entry point '{name}' = 'their.backend' of their-dist is refused"):
        registry[name].load()


def test_backends_named_kernels_configure_which_and_testing_do_not_replace_lazyops_own(fake_backends):
    for name in ("kernels", "configure", "which", "testing"):
        fake_backends.make(name, ["alpha_tl"], package=f"lazyops_fake_{name}")
    fake_backends.make("fine", ["alpha_tl"])
    code = """
    import importlib, json, lazyops
    outcomes = {}
    for name in ("kernels", "configure", "which", "testing"):
        try:
            module = importlib.import_module(f"lazyops.{name}")
            outcomes[name] = module.__name__
        except ImportError as error:
            outcomes[name] = type(error).__name__ + ": " + str(error)
    import lazyops.fine
    print(json.dumps({
        "outcomes": outcomes,
        "callable": [callable(getattr(lazyops, n)) for n in ("kernels", "configure", "which")],
        "kernels": "alpha_tl" in lazyops.kernels(),
        "which": lazyops.which("alpha_tl").backend,
    }))
    """
    result = run_python(code, fake_backends.env(LAZYOPS_BACKEND="fine"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["callable"] == [True, True, True]
    assert report["outcomes"]["testing"] == "lazyops.testing"  # the real subpackage, as before
    for name in ("kernels", "configure", "which"):
        assert report["outcomes"][name].startswith(f"BackendError: entry point {name!r}")
        assert "is lazyops' own" in report["outcomes"][name]
    assert report["kernels"] and report["which"] == "fine"


# -- 27.16: one distribution's unreadable metadata -------------------------------------------------------------
def test_a_plugin_whose_metadata_is_not_utf8_stops_nothing(fake_backends):
    fake_backends.make("latin", ["alpha_tl"], distribution="fake-latin")
    metadata = fake_backends.root / "fake_latin-1.0.dist-info" / "METADATA"
    metadata.write_bytes(metadata.read_bytes() + b"Author: Jos\xe9\n")  # latin-1, as some old tools write it
    fake_backends.make("fine", ["beta_tl"])
    code = """
    import json, lazyops
    print(json.dumps({
        "backends": list(lazyops.backends()),
        "kernels": [k for k in lazyops.kernels() if k in ("alpha_tl", "beta_tl")],
        "unresolved": list(lazyops.resolve_all()),
        "alpha": lazyops.alpha_tl()[0],
        "beta": lazyops.beta_tl()[0],
    }))
    """
    for eager in ("0", "1"):
        result = run_python(code, fake_backends.env(LAZYOPS_BACKEND="latin,fine,torch", EAGER_IMPORT=eager))
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert {"latin", "fine"} <= set(report["backends"])
        assert report["kernels"] == ["alpha_tl", "beta_tl"] and report["unresolved"] == []
        assert (report["alpha"], report["beta"]) == ("latin", "fine")
    origin = Registry.discover()["latin"].origin
    assert "fake_latin-1.0.dist-info" in origin and "metadata is unreadable: UnicodeDecodeError" in origin


def test_an_unreadable_entry_point_file_leaves_the_builtins_and_says_why(fake_backends):
    broken = fake_backends.root / "broken-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (broken / "entry_points.txt").write_bytes(b"[console_scripts]\nbroken = broken:main  # Jos\xe9\n")
    registry = Registry.discover()
    assert registry.names == ("torch", "triton", "tilelang")
    (refusal,) = registry.refused
    assert "entry points cannot be read (UnicodeDecodeError" in refusal.reason
    assert "only the built-in backends are available" in refusal.reason


# -- the stub reader ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, manifest",
    [
        ("from .a import a_tl as a_tl\nfrom .b import b_tl as b_tl\n", {"a_tl": ("a", "a_tl"), "b_tl": ("b", "b_tl")}),
        (
            '"""Doc."""\n# c\ndef unavailable_reason() -> str | None: ...\nfrom .a import (a_tl, b as c_tl)\n',
            {"a_tl": ("a", "a_tl"), "c_tl": ("a", "b")},
        ),
        ("from .a.b import x_tl\nfrom .c import _private_tl\nfrom .d import helper\n", {"x_tl": ("a.b", "x_tl")}),
    ],
)
def test_the_stub_reader_keeps_each_kernels_module_and_attribute(tmp_path, text, manifest):
    stub = tmp_path / "__init__.pyi"
    stub.write_text(text)
    assert read_manifest(str(stub)) == manifest


@pytest.mark.parametrize(
    "text, error",
    [
        (
            "from .a import a_tl\nfrom .b import c as a_tl\n",
            "exports 'a_tl' twice: from .a (line 1) and from .b (line 2)",
        ),
        ("from a import a_tl\n", "line 1: only 'from .module import name as name' lines declare kernels"),
        ("from . import a_tl\n", "line 1: only 'from .module import name as name' lines declare kernels"),
    ],
)
def test_the_stub_reader_says_what_is_wrong_and_where(tmp_path, text, error):
    stub = tmp_path / "__init__.pyi"
    stub.write_text(text)
    with pytest.raises(ManifestError) as caught:
        read_manifest(str(stub))
    assert error in str(caught.value)
