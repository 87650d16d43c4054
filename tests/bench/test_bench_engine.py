"""The timing engine (``lazyops._bench``) on the host: every specified kernel gets rows, with no benchmark code of
its own; results are plain data; a kernel's peer module is optional. Nothing here asserts a timing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from lazyops import _bench
from lazyops.specs import kernel_names, spec
from lazyops.testing import Case, check_case

KERNELS = kernel_names()
TOKENS = (1, 3)


@pytest.fixture(scope="module")
def rows() -> list[_bench.Row]:
    """Stream rows of every kernel, the torch backend and the generic peers, at tiny sizes (one set, one repeat)."""
    measured = []
    for kernel in KERNELS:
        impls = _bench.implementations(kernel, ["torch"])
        measured += _bench.measure(kernel, impls, TOKENS, device="cpu", small=True, repeats=1)
    _bench.rank(measured)
    return measured


def test_every_kernel_gets_a_row_per_implementation_and_token_count(rows):
    got = {(row.kernel, row.impl, row.tokens) for row in rows if row.impl in ("lazyops torch", _bench.EAGER)}
    assert got == {
        (k.removesuffix("_tl"), impl, m) for k in KERNELS for impl in ("lazyops torch", _bench.EAGER) for m in TOKENS
    }
    for row in rows:
        if row.impl in ("lazyops torch", _bench.EAGER):
            assert row.error is None, row
            assert row.us > 0 and row.rate > 0 and row.unit in ("GB/s", "TFLOP/s")
            assert row.bytes > 0 and row.input_sets == 1 and row.config.startswith(f"{row.kernel}_tl(")
            assert row.vs_best_peer is not None


def test_rows_round_trip_through_json(rows):
    payload = json.loads(json.dumps([dataclasses.asdict(row) for row in rows]))
    assert [_bench.Row(**row) for row in payload] == rows


def test_host_and_graph_rows_never_raise_on_the_host():
    kernel = KERNELS[0]
    impls = _bench.implementations(kernel, ["torch"], peers=False)
    host = _bench.host_time(kernel, impls, device="cpu", small=True, calls=3, warmup=1)
    assert [row.impl for row in host] == [impl.name for impl in impls]
    assert all(row.error is None and row.us > 0 and row.method == "host" for row in host)
    graph = _bench.graph_time(kernel, impls, (1,), device="cpu", small=True)
    assert all(row.us is None and "CUDA graphs need a CUDA device" in row.error for row in graph)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_eager_peer_is_the_spec(kernel):
    """``torch eager`` computes what the spec defines, in-place results and return value included: the kit's
    judge says so, as for any backend's kernel."""
    kernel_spec = spec(kernel)

    def factory(*args, **kwargs):
        return _bench.eager_call(kernel_spec, kernel_spec.configure(*args, **kwargs))

    chosen = _bench.example(kernel, torch.float32, small=True)
    check_case(factory, Case(kernel, chosen.args, dict(chosen.kwargs), (1, 5), 0, dict(chosen.geometry)), device="cpu")


def test_a_peer_module_is_optional(tmp_path):
    """No module: the generic peers only. A module: its peers join; one not installed gets a row saying so."""
    kernel = "rmsnorm_tl"
    bare = _bench.implementations(kernel, ["torch"], peers_from=tmp_path)
    assert [impl.name for impl in bare] == ["lazyops torch", _bench.EAGER]
    (tmp_path / "rmsnorm.py").write_text(
        "def scaled(config):\n"
        "    import torch\n"
        "    return lambda x, weight: torch.nn.functional.rms_norm(x, (config.n,), weight, config.eps)\n"
        "def absent(config):\n"
        "    import not_a_package_lazyops_knows\n"
        "PEERS = {'F.rms_norm here': scaled, 'absent': absent}\n"
    )
    impls = _bench.implementations(kernel, ["torch"], peers_from=tmp_path)
    assert [impl.name for impl in impls] == ["lazyops torch", _bench.EAGER, "F.rms_norm here", "absent"]
    by_impl = {row.impl: row for row in _bench.measure(kernel, impls, [2], device="cpu", small=True, repeats=1)}
    assert by_impl["F.rms_norm here"].error is None and by_impl["F.rms_norm here"].rate > 0
    assert by_impl["absent"].error.startswith("not installed here: ModuleNotFoundError")
    softmax = _bench.implementations("softmax", ["torch"], peers_from=tmp_path)  # no softmax.py there
    assert [impl.name for impl in softmax] == ["lazyops torch", _bench.EAGER]


def test_a_backend_that_cannot_run_or_is_unknown_gets_error_rows():
    impls = _bench.implementations("softmax", ["torch", "nope"], peers=False)
    assert impls[1].problem and "no backend 'nope'" in impls[1].problem
    rows = _bench.measure("softmax", impls, [1], device="cpu", small=True, repeats=1)
    assert rows[1].impl == "lazyops nope" and rows[1].error.startswith("unavailable: ")


def test_import_lazyops_does_not_import_the_engine():
    code = "import sys, lazyops; lazyops.kernels(); assert 'lazyops._bench' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("kernel", KERNELS)
def test_same_bytes_copy_moves_what_the_kernel_moves_and_is_never_a_peer(kernel):
    impls = _bench.implementations(kernel, ["torch"], peers=False, same_bytes_copy=True)
    ceilings = [impl for impl in impls if impl.kind == "ceiling"]
    chosen = _bench.example(kernel, small=True)
    config = spec(kernel).configure(*chosen.args, **chosen.kwargs)
    if spec(kernel).traffic(config, 1, chosen.geometry).bound == "compute":
        assert ceilings == []  # a GEMM's ceiling is its FLOPs, not a copy
        return
    assert [impl.name for impl in ceilings] == [_bench.SAME_BYTES_COPY]
    rows = _bench.measure(kernel, impls, (5,), device="cpu", small=True, repeats=1)
    _bench.rank(rows)
    (copy,) = [row for row in rows if row.kind == "ceiling"]
    assert copy.error is None and copy.bytes == spec(kernel).traffic(config, 5, chosen.geometry).bytes
    # the copy's buffers hold those bytes, half read and half written (to within one bf16 element pair)
    peer = ceilings[0].build(chosen)
    inputs = _bench._input_sets(spec(kernel), config, chosen, 5, "cpu", 0)[0]
    source, target = peer.prepare(*inputs)
    assert abs(2 * source.numel() * source.element_size() - copy.bytes) < 4 and target.shape == source.shape
    peer.call(source, target)
    assert torch.equal(source, target)
    # never ranked as a peer: the lazyops row stands against the best of the peers alone
    best_peer = max(row.rate for row in rows if row.kind == "peer" and row.rate is not None)
    (ours,) = [row for row in rows if row.kind == "lazyops"]
    assert ours.vs_best_peer == pytest.approx(ours.rate / best_peer)
