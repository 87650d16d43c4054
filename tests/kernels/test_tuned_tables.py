"""The backends' tuned tables (``_backends/<backend>/configs/*.json``): every table parses into the tiles its
kernels take, every tile is one they can compile, a GPU the file does not name takes the default table, and the
wheel carries the files.

Whether a table's tiles are the fastest is held to the measurements by ``test_{triton,tilelang}_matmul_tiling.py``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from pathlib import Path
from typing import Any

import pytest

import lazyops

PACKAGE = Path(lazyops.__file__).resolve().parent
TABLE_FILES = sorted(PACKAGE.glob("_backends/*/configs/*.json"))


def power_of_two(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_every_backends_gemm_has_its_table_file() -> None:
    assert [path.relative_to(PACKAGE).as_posix() for path in TABLE_FILES] == [
        "_backends/tilelang/configs/matmul.json",
        "_backends/triton/configs/matmul.json",
        "_backends/triton/configs/matmul_fp8.json",
        "_backends/triton/configs/paged_attention.json",
    ]


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda path: path.parent.parent.name)
def test_a_table_file_names_its_default_and_says_where_its_values_come_from(path: Path) -> None:
    data = read(path)
    assert set(data) == {"about", "default", "tables"}
    assert data["default"] in data["tables"], f"{path}: the default {data['default']!r} is not one of its tables"
    assert "docs/decisions/" in data["about"], f"{path}: 'about' must point to the decision records"


def triton_tiles() -> list[tuple[str, str, Any]]:
    pytest.importorskip("triton")
    from lazyops._backends.triton import matmul

    path = PACKAGE / "_backends/triton/configs/matmul.json"
    return [
        (device, name, tile) for device in read(path)["tables"] for name, tile in _fields(matmul.tile_table(device))
    ]


def tilelang_tiles() -> list[tuple[str, str, Any]]:
    pytest.importorskip("tilelang")
    from lazyops._backends.tilelang import matmul

    path = PACKAGE / "_backends/tilelang/configs/matmul.json"
    return [
        (device, name, tile) for device in read(path)["tables"] for name, tile in _fields(matmul.tile_table(device))
    ]


def _fields(table: Any) -> list[tuple[str, Any]]:
    return [(field.name, getattr(table, field.name)) for field in dataclasses.fields(table)]


def test_every_triton_tile_compiles_as_the_kernels_take_it() -> None:
    """Tile sides are powers of two of at least 16 (``tl.arange`` and ``tl.dot``); warps a power of two; two stages
    or more; split-K is the rule's to choose (never in the table); persistent programs and the graphs-only switch
    exist only on the TMA kernel."""
    for device, name, value in triton_tiles():
        where = f"triton {device!r} {name}"
        if name == "min_slice_steps":
            assert isinstance(value, int) and value >= 1, where
            continue
        assert all(power_of_two(side) and side >= 16 for side in (value.block_m, value.block_n, value.block_k)), where
        assert power_of_two(value.num_warps) and value.num_warps <= 32, where
        assert isinstance(value.num_stages, int) and value.num_stages >= 2, where
        assert (value.split, value.k_slice) == (1, 0), f"{where}: split-K is chosen by tiling(), not the table"
        assert value.tma or not (value.persistent or value.tma_in_graphs_only), where
        assert isinstance(value.persistent, int) and value.persistent >= 0, where


def test_every_triton_attention_tile_compiles_as_the_kernel_takes_it() -> None:
    """Every head dim the kernel serves (16 to 256, powers of two) has a prefill and a decode tile; rows and keys a
    step are powers of two of at least 16 (``tl.dot``); warps a power of two; two stages or more; the split rule's
    numbers positive, its segments a power of two (the merge reads them all at once)."""
    pytest.importorskip("triton")
    from lazyops._backends.triton import paged_attention

    path = PACKAGE / "_backends/triton/configs/paged_attention.json"
    for device in read(path)["tables"]:
        table = paged_attention.attention_table(device)
        assert set(table.prefill) == set(table.decode) == {16, 32, 64, 128, 256}, device
        tiles = [*table.prefill.values(), *table.decode.values(), table.float32]
        for value in tiles:
            assert power_of_two(value.block_m) and power_of_two(value.tile_n) and value.tile_n >= 16, (device, value)
            assert value.block_m >= 16 and power_of_two(value.num_warps) and value.num_stages >= 2, (device, value)
        rule = table.split
        assert min(rule.max_tokens, rule.programs_per_sm, rule.min_segment_keys, table.prefill_queries) >= 1, device
        assert power_of_two(rule.max_segments), device
        # long sequences' segments (0: off) are longer than the shortest, within more programs an SM than the fill's
        assert rule.long_segment_keys == 0 or rule.long_segment_keys >= rule.min_segment_keys, device
        assert rule.long_segment_keys == 0 or rule.max_programs_per_sm >= rule.programs_per_sm, device


def test_every_triton_fp8_gemm_tile_compiles_as_the_kernel_takes_it() -> None:
    """``matmul_fp8_tl``'s rows: tile sides powers of two of at least 16 (``tl.dot``), warps a power of two, two
    stages or more; token buckets rising, the last one open (``max_m`` null), so that every count has a tile; each
    table says where its rows come from."""
    pytest.importorskip("triton")
    from lazyops._backends.triton import matmul_fp8

    path = PACKAGE / "_backends/triton/configs/matmul_fp8.json"
    for device, table in read(path)["tables"].items():
        assert "vllm" in table["source"] and "configs/N=" in table["source"], device
        tiles = matmul_fp8.tile_table(device)
        bounds = [tile.max_m for tile in tiles[:-1]]
        assert tiles[-1].max_m is None and bounds == sorted(set(bounds)) and all(b >= 1 for b in bounds), device
        for tile in tiles:
            assert power_of_two(tile.block_m) and power_of_two(tile.block_n), (device, tile)
            assert min(tile.block_m, tile.block_n) >= 16 and power_of_two(tile.num_warps), (device, tile)
            assert isinstance(tile.num_stages, int) and tile.num_stages >= 2, (device, tile)
        assert [matmul_fp8.tiling(m, tiles) for m in (1, bounds[0], bounds[0] + 1)] == [tiles[0], tiles[0], tiles[1]]
        assert matmul_fp8.tiling(16384, tiles) == tiles[-1]
    assert matmul_fp8.tile_table("NVIDIA GeForce RTX 4090") == matmul_fp8.tile_table("NVIDIA H200")


def test_every_tilelang_tile_compiles_as_the_kernels_take_it() -> None:
    """Tile sides are powers of two of at least 16 (the ``mma``/``wgmma`` shapes, TileLang's layouts); threads whole
    warpgroups; two stages or more; a full-row tile gives each warpgroup 64 rows (one m64nN ``wgmma``); no table
    tile is persistent (those programs are built but unused, docs/decisions/005)."""
    for device, name, value in tilelang_tiles():
        where = f"tilelang {device!r} {name}"
        if name in ("min_slice_steps", "max_blocks_per_sm"):
            assert isinstance(value, int) and value >= 1, where
            continue
        assert all(power_of_two(side) and side >= 16 for side in (value.block_m, value.block_n, value.block_k)), where
        assert isinstance(value.threads, int) and value.threads > 0 and value.threads % 128 == 0, where
        assert isinstance(value.stages, int) and value.stages >= 2, where
        assert value.warp_policy in ("square", "full_row"), where
        if value.warp_policy == "full_row":
            assert value.block_m == 64 * (value.threads // 128), where
        assert isinstance(value.shared_epilogue, bool) and value.persistent == 0, where


def test_a_gpu_the_file_does_not_name_takes_the_default_table() -> None:
    pytest.importorskip("triton")
    from lazyops._backends.triton import matmul

    assert matmul.tile_table("NVIDIA GeForce RTX 4090") == matmul.tile_table(None) == matmul.DEFAULT_TABLE
    assert matmul.tile_table("NVIDIA H200") is matmul.tile_table("NVIDIA H200"), "built once per device"


def test_the_wheel_carries_the_table_files() -> None:
    """``[tool.setuptools.package-data]`` names every data file under src/lazyops, so the installed package finds its
    tables (tests/stubs/test_installed_wheel.py builds the wheel itself)."""
    tomllib = pytest.importorskip("tomllib")
    source = PACKAGE.parent
    pyproject = source.parent / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("lazyops is not imported from a checkout")
    patterns = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]
    for path in TABLE_FILES:
        package = path.parent
        while not (package / "__init__.py").exists():
            package = package.parent
        name = ".".join(package.relative_to(source).parts)
        relative = path.relative_to(package).as_posix()
        wanted = [*patterns.get("*", ()), *patterns.get(name, ())]
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in wanted), f"{name}: {relative} not in {wanted}"
