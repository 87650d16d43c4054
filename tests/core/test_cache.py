"""The on-disk cache (lazyops._cache) of entry points and kernel lists: used only while its inputs are unchanged,
never written for inputs that may still change unseen, and never fatal (issue 12, "The namespace")."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lazyops import _cache
from lazyops._manifest import KernelList, read_kernel_list, read_manifest
from lazyops._namespace import Namespace
from lazyops._registry import _entry_points_from_directories, _entry_points_from_metadata


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("LAZYOPS_CACHE_DIR", str(where))
    return where


def age(*paths: Path, seconds: float = 60) -> None:
    """Date files back, as an installed package's are: younger ones are not recorded (the racy rule)."""
    then = time.time_ns() - int(seconds * 1e9)
    for path in paths:
        os.utime(path, ns=(then, then))


def age_tree(root: Path, seconds: float = 60) -> None:
    age(*sorted(root.rglob("*"), reverse=True), root, seconds=seconds)


def names_of(specs):
    return sorted((spec.name, spec.value, spec.distribution) for spec in specs)


def records(cache_dir: Path, kind: str) -> list[Path]:
    return sorted(cache_dir.glob(f"{kind}-*.marshal")) if cache_dir.exists() else []


def test_a_newly_installed_entry_point_is_seen(fake_backends, cache_dir):
    fake_backends.register("one", "lazyops_fake_one", "fake-one")
    age_tree(fake_backends.root)
    first = _entry_points_from_directories()
    assert ("one", "lazyops_fake_one", "fake-one") in names_of(first)
    assert len(records(cache_dir, "entry-points")) == 1  # every input old enough: recorded
    assert names_of(_entry_points_from_directories()) == names_of(first)  # served from the record

    fake_backends.register("two", "lazyops_fake_two", "fake-two")  # a new .dist-info: its folder's mtime moves
    seen = names_of(_entry_points_from_directories())
    assert ("two", "lazyops_fake_two", "fake-two") in seen and ("one", "lazyops_fake_one", "fake-one") in seen
    assert seen == names_of(_entry_points_from_metadata())


def test_an_edited_entry_point_file_is_seen(fake_backends, cache_dir):
    fake_backends.register("one", "lazyops_fake_one", "fake-one")
    age_tree(fake_backends.root)
    _entry_points_from_directories()
    assert records(cache_dir, "entry-points")
    entry_points = fake_backends.root / "fake_one-1.0.dist-info" / "entry_points.txt"
    entry_points.write_text("[lazyops.backends]\nuno = lazyops_fake_one\n")  # in place: the folders keep their mtime
    age(entry_points, seconds=30)
    assert ("uno", "lazyops_fake_one", "fake-one") in names_of(_entry_points_from_directories())
    assert names_of(_entry_points_from_directories()) == names_of(_entry_points_from_metadata())


def test_inputs_younger_than_the_racy_window_are_not_recorded(fake_backends, cache_dir):
    fake_backends.register("one", "lazyops_fake_one", "fake-one")  # just written
    assert ("one", "lazyops_fake_one", "fake-one") in names_of(_entry_points_from_directories())
    assert records(cache_dir, "entry-points") == []


def write_stub(directory: Path, kernels: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stub = directory / "__init__.pyi"
    stub.write_text("".join(f"from .{k.removesuffix('_tl')} import {k} as {k}\n" for k in kernels))
    return stub


def test_a_kernel_list_is_read_from_its_record_while_the_stub_is_unchanged(tmp_path, cache_dir, monkeypatch):
    stub = write_stub(tmp_path / "pkg", ["b_tl", "a_tl"])
    age(stub)
    first = read_kernel_list(str(stub))
    assert first.names() == ("a_tl", "b_tl") and len(records(cache_dir, "kernels")) == 1

    def no_parse(path):
        raise AssertionError("the stub was parsed although its record is current")

    monkeypatch.setattr("lazyops._manifest.read_manifest", no_parse)
    again = read_kernel_list(str(stub))
    assert again.names() == first.names() and again.manifest() == first.manifest()


def test_a_changed_stub_is_read_again(tmp_path, cache_dir):
    stub = write_stub(tmp_path / "pkg", ["a_tl", "b_tl"])
    age(stub, seconds=60)
    assert read_kernel_list(str(stub)).names() == ("a_tl", "b_tl")
    write_stub(tmp_path / "pkg", ["a_tl", "c_tl"])  # the same size, in place
    age(stub, seconds=30)  # and an old timestamp again, only a different one
    assert read_kernel_list(str(stub)).names() == ("a_tl", "c_tl")
    replaced = tmp_path / "new.pyi"
    replaced.write_text("from .d import d_tl as d_tl\nfrom .e import e_tl as e_tl\n")
    os.utime(replaced, ns=(stub.stat().st_atime_ns, stub.stat().st_mtime_ns))
    os.replace(replaced, stub)  # a new file of the same size and timestamp: the inode tells
    assert read_kernel_list(str(stub)).names() == ("d_tl", "e_tl")


def test_a_fresh_stub_is_not_recorded(tmp_path, cache_dir):
    stub = write_stub(tmp_path / "pkg", ["a_tl"])
    assert read_kernel_list(str(stub)).names() == ("a_tl",)
    assert records(cache_dir, "kernels") == []


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch, fake_backends):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("LAZYOPS_CACHE_DIR", str(blocker / "cache"))  # cannot be made, whoever runs the test
    stub = write_stub(tmp_path / "pkg", ["a_tl"])
    age(stub)
    assert read_kernel_list(str(stub)).names() == ("a_tl",)
    fake_backends.register("one", "lazyops_fake_one", "fake-one")
    age_tree(fake_backends.root)
    assert ("one", "lazyops_fake_one", "fake-one") in names_of(_entry_points_from_directories())
    assert not _cache.store("anything", ("key",), "value", 0)


@pytest.mark.parametrize("garbage", [b"", b"\x00\x01not marshal", b"\xff" * 64])
def test_a_corrupt_record_is_ignored_and_rebuilt(tmp_path, cache_dir, garbage):
    stub = write_stub(tmp_path / "pkg", ["a_tl", "b_tl"])
    age(stub)
    read_kernel_list(str(stub))
    (record,) = records(cache_dir, "kernels")
    record.write_bytes(garbage)
    assert read_kernel_list(str(stub)).names() == ("a_tl", "b_tl")
    facts = stub.stat()
    key = (str(stub), facts.st_ino, facts.st_size, facts.st_mtime_ns)
    assert _cache.load(record.name, key) is not None  # rewritten whole


def test_a_record_of_another_shape_is_ignored(tmp_path, cache_dir):
    stub = write_stub(tmp_path / "pkg", ["a_tl"])
    age(stub)
    facts = stub.stat()
    key = (str(stub), facts.st_ino, facts.st_size, facts.st_mtime_ns)
    assert _cache.store(_cache.file_name("kernels", str(stub)), key, ("wrong", 3), 0)
    assert read_kernel_list(str(stub)).names() == ("a_tl",)


def test_a_kernel_list_answers_as_the_manifest_it_holds():
    manifest = {"rmsnorm_tl": ("rmsnorm", "rmsnorm_tl"), "add_rmsnorm_tl": ("add", "fused_tl"), "x_tl": (None, "x_tl")}
    kernels = KernelList.of(manifest)
    assert kernels.manifest() == manifest and len(kernels) == 3
    assert list(kernels) == sorted(manifest) and set(kernels) == set(manifest)
    for probe in ["rmsnorm", "norm_tl", "add_rmsnorm", "rmsnorm_tl\tadd", "a\nrmsnorm_tl", "", "add", "fused_tl", 3]:
        assert probe not in kernels
    assert kernels.where("add_rmsnorm_tl") == ("add", "fused_tl") and kernels.where("x_tl") == (None, "x_tl")
    with pytest.raises(KeyError):
        kernels.where("add")
    empty = KernelList.of({})
    assert len(empty) == 0 and list(empty) == [] and "a_tl" not in empty


def test_the_kernel_list_agrees_with_the_stub_reader(tmp_path, cache_dir):
    stub = tmp_path / "__init__.pyi"
    stub.write_text(
        "# c\nfrom .a.b import c_tl as d_tl\nfrom .e import f as f_tl\nfrom .g import _h_tl\nfrom .i import j\n"
    )
    age(stub)
    for _ in range(2):  # parsed, then from the record
        assert read_kernel_list(str(stub)).manifest() == read_manifest(str(stub))


@pytest.mark.parametrize("chain", [["ext"], ["other"], ["ext", "other"], ["torch"], ["other", "torch"]])
def test_the_known_kernels_view_agrees_with_the_union(fake_backends, cache_dir, chain):
    fake_backends.make("ext", ["alpha_tl", "rmsnorm_tl", *[f"k{i}_tl" for i in range(50)]])
    fake_backends.make("other", ["alpha_tl", "beta_tl", "softmax_tl"])
    universe = Namespace({}, environ={}, default=lambda: "torch").universe()
    known = universe.known_kernels()
    lists = {name: frozenset(universe.exports(name)) for name in universe.backends}
    union = frozenset().union(*lists.values())
    assert len(known) == len(union)
    assert known.outside([universe.exports(b) for b in chain]) == union.difference(*(lists[b] for b in chain))
    assert all(name in known for name in union) and "gamma_tl" not in known
    assert universe.kernel_names() == tuple(sorted(union)) and set(known) == union


def test_the_bisection_answers_as_a_set_does():
    import random

    rng = random.Random(12)
    words = {"".join(rng.choice("ab_") for _ in range(rng.randint(1, 6))) + "_tl" for _ in range(400)}
    manifest = {word: (f"m{index}", word) for index, word in enumerate(sorted(words))}
    kernels = KernelList.of(manifest)
    probes = words | {word[:-1] for word in words} | {"a" + word for word in words} | {"", "_tl", "zz_tl", "\n"}
    for probe in sorted(probes):
        assert (probe in kernels) == (probe in manifest), probe
    assert all(kernels.where(word) == manifest[word] for word in words)
