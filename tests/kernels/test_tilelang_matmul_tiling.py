"""TileLang's decode GEMM plan: held to the H200 measurements it was set from, and to what any GPU can launch.

``plan_split`` is arithmetic over the shape and the device's SM count and shared memory, so it is tested here
without a GPU: against ``benchmarks/results/h200/sweeps/gemm_decode_sweep_tilelang.json`` (84 tilings timed in
CUDA graphs on an H200; ``benchmarks/bench_gemm.py --sweep tilelang`` today), and by drawn shapes and devices for the
invariants the programs rely on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("tilelang")

from gemm_sweeps import timed_cells  # tests/kernels is on sys.path (pytest prepends it)

from lazyops._backends.tilelang import matmul

SWEEP = (
    Path(__file__).resolve().parents[2]
    / "benchmarks"
    / "results"
    / "h200"
    / "sweeps"
    / "gemm_decode_sweep_tilelang.json"
)
H200_SMS = 132
H200_SHARED_MEMORY = 227 * 1024


def plan_for(m: int, plans: tuple) -> matmul.SplitK:
    """The plan the factory takes for ``m`` tokens: the first whose ``max_m`` covers it."""
    return next(plan for plan in plans if m <= plan.max_m)


def h200_plan(m: int, n: int, k: int) -> matmul.SplitK:
    """The plan for ``m`` tokens of a bfloat16 ``[k, n]`` weight on an H200."""
    return plan_for(m, matmul.split_plans(matmul.spec.bind(n, k, "bfloat16"), H200_SMS, H200_SHARED_MEMORY))


def plan_key(plan: matmul.SplitK) -> tuple[int, int, int, int, int]:
    """A plan as the sweeps key their tilings: block_m, block_n, block_k, stages, split."""
    tile = plan.tile
    return (tile.block_m, tile.block_n, tile.block_k, tile.stages, plan.split)


def peers_and_tilings(here: list[dict], keep=None) -> tuple[dict[str, float], dict[tuple, float]]:
    """A sweep cell's rows: every row's µs by its ``impl`` (``cuBLAS`` and ``rule`` read from it), and each timed
    tiling's (``keep``: which rows; by default every one but cuBLAS and the rule) by the key of :func:`plan_key`."""
    by_impl = {row["impl"]: row["graph_us"] for row in here}
    timed = {
        (row["block_m"], row["block_n"], row["block_k"], row["num_stages"], row["split"]): row["graph_us"]
        for row in here
        if (keep(row) if keep else row["impl"] not in ("cuBLAS", "rule"))
    }
    return by_impl, timed


#: The sweeps that set the shared-memory-store decode plans: (sweep file, tokens, the plan's tile, how much faster
#: than the sweep's ``rule`` row it must be).
#: - ``gemm_decode_sweep_tilelang_tma``: the 64-row tilings with their results stored through shared memory, at
#:   M = 64 and 128. At M = 64 the plan (64 x 128 x 64, 4 stages, split by the slot rule) was the fastest candidate
#:   of every cell and 1.09-1.23x faster than the M <= 128 plan of then; it beat cuBLAS at two shapes of three. It
#:   keeps the weight shapes whose 64 x 128 tiles fill half the SMs (n = 14336); narrower ones take NARROW_64.
#: - ``gemm_decode_sweep_tilelang_rows128``: 128-row tilings (the whole batch in one row block) at M = 128. The plan
#:   (128 x 128 x 64, 4 stages, partials through shared memory, split by the slot rule) was the fastest candidate
#:   of every cell and faster than the 64 x 256 plan of then; still below cuBLAS (0.83-0.97x). It keeps the weight
#:   shapes whose 64 x 128 tiles fill half the SMs (n = 14336); narrower ones take NARROW_128 (the tests after).
SHARED_STORE_SWEEPS = (
    ("gemm_decode_sweep_tilelang_tma.json", 64, matmul.SPLIT_64, 1.09, ((14336, 4096),)),
    ("gemm_decode_sweep_tilelang_rows128.json", 128, matmul.SPLIT_128, 1.0, ((14336, 4096),)),
)


@pytest.mark.parametrize(("sweep", "m", "tile", "margin", "shapes"), SHARED_STORE_SWEEPS, ids=lambda v: str(v)[:40])
def test_the_plan_is_the_fastest_shared_memory_store_tiling_of_its_sweep(sweep, m, tile, margin, shapes) -> None:
    cells = timed_cells(sweep)
    for n, k in shapes:
        by_impl, timed = peers_and_tilings(cells[(m, n, k)], keep=lambda row: row.get("shared_epilogue"))
        plan = h200_plan(m, n, k)
        assert plan.max_m == m and plan.tile == tile and tile.shared_epilogue
        mine = timed[plan_key(plan)]
        assert mine == min(timed.values()), f"M={m} n={n} k={k}"
        assert mine * margin < by_impl["rule"], f"M={m} n={n} k={k}"


#: The sweeps that set the narrow-weight plans: (sweep file, tokens, the plan's tile there). Each timed tilings
#: narrower than the plans of then (64 and 32 columns, 64- and 128-row, 128- and 256-deep k-steps, 3-6 stages, every
#: split) beside those plans (their ``rule`` rows) and cuBLAS.
#: - ``gemm_decode_sweep_tilelang_narrow``, M = 128: NARROW_128 (64 x 64 x 128, 5 stages) against 64 x 128 x 128
#:   split 2, the plan of then, at n = 4096; SPLIT_128 at n = 14336 faster than every 64-column tiling.
#: - ``gemm_decode_sweep_tilelang_narrow32``, M = 64: NARROW_64 (64 x 32 x 128, 6 stages) against SPLIT_64 at
#:   n = 4096; SPLIT_64 at n = 14336 faster than every 32-column tiling. Its M = 128 rows (128 x 32 tiles, the
#:   weight read once) were all slower than NARROW_128, then the rule.
NARROW_SWEEPS = (
    ("gemm_decode_sweep_tilelang_narrow.json", 128, matmul.NARROW_128),
    ("gemm_decode_sweep_tilelang_narrow32.json", 64, matmul.NARROW_64),
    ("gemm_decode_sweep_tilelang_narrow32.json", 128, matmul.NARROW_128),
)


@pytest.mark.parametrize(("sweep", "m", "narrow"), NARROW_SWEEPS, ids=lambda v: str(v)[:40])
def test_narrow_weights_take_the_narrow_tiles_their_sweeps_measured(sweep, m, narrow) -> None:
    """Where the plan's tile was timed it is the cell's fastest candidate (within 1 %: at M = 64, k = 14336 the
    256-deep tile was 0.7 % faster) and faster than the plan it replaced; where it was not, the plan (the ``rule``
    row) beat every candidate. (Against cuBLAS, read in the sweeps: 1.08x and 1.04x at M = 128, 0.96x and 1.08x at
    M = 64.)"""
    cells = {key: rows for key, rows in timed_cells(sweep).items() if key[0] == m}
    assert len(cells) == 3, "the sweep covers three weight shapes at each M"
    narrow_cells = 0
    for (_, n, k), here in cells.items():
        by_impl, timed = peers_and_tilings(here)
        plan = h200_plan(m, n, k)
        key = plan_key(plan)
        if plan.tile == narrow and key in timed:
            narrow_cells += 1
            assert timed[key] <= min(timed.values()) * 1.01, f"M={m} n={n} k={k}"
            assert timed[key] < by_impl["rule"], f"M={m} n={n} k={k}"
        else:
            assert by_impl["rule"] <= min(timed.values()), f"M={m} n={n} k={k}: a narrower tiling was faster"
    assert h200_plan(m, 4096, 4096).tile == narrow
    assert narrow_cells in (0, 2), "both n = 4096 cells are judged the same way"


def test_up_to_16_tokens_narrow_weights_take_the_unsplit_narrow_tile_its_sweep_measured() -> None:
    """``gemm_decode_sweep_tilelang_narrow16`` timed 16-row tiles 32 and 64 columns wide (128- and 256-deep steps,
    5-6 stages, every split) at M = 1 and 16 beside SPLIT_16 split by the slot rule (its ``rule`` rows). One binary
    serves both token counts, so the tile is judged over the bucket: at n = 4096 NARROW_16 unsplit is within 5 % of
    each cell's fastest candidate and within 1.5 % of the old plan in each cell (M = 1, k = 14336: 30.06 against
    29.67 µs), and faster over the four cells together (geometric mean) and at 4096 x 4096 by 6-9 %. At n = 14336
    SPLIT_16 (unsplit there) beat every narrower candidate."""
    import math

    cells = timed_cells("gemm_decode_sweep_tilelang_narrow16.json")
    assert len(cells) == 6, "the sweep covers M = 1, 16 at three weight shapes"
    ratios = []
    for (m, n, k), here in cells.items():
        by_impl, timed = peers_and_tilings(here)
        plan = h200_plan(m, n, k)
        tile = plan.tile
        if n == 4096:
            assert tile == matmul.NARROW_16 and plan.split == 1, f"M={m} n={n} k={k}"
            mine = timed[plan_key(plan)]
            assert mine <= min(timed.values()) * 1.05, f"M={m} n={n} k={k}"
            assert mine <= by_impl["rule"] * 1.015, f"M={m} n={n} k={k}"
            if k == 4096:
                assert mine * 1.06 < by_impl["rule"], f"M={m} n={n} k={k}"
            ratios.append(mine / by_impl["rule"])
        else:
            assert tile == matmul.SPLIT_16, f"M={m} n={n} k={k}: {tile}"
            assert by_impl["rule"] <= min(timed.values()), f"M={m} n={n} k={k}: a narrower tiling was faster"
    assert len(ratios) == 4
    assert math.exp(sum(math.log(r) for r in ratios) / 4) < 0.97


def test_only_weights_whose_unsplit_tiles_fill_most_sms_go_unsplit() -> None:
    """NARROW_16 runs unsplit only where its tiles give at least 3/8 of the SMs a block (64 of 132 at n = 4096, the
    measured case); a much narrower weight with a long k keeps the split plan that fills the SMs."""
    unsplit = matmul.split_plans(matmul.spec.bind(3200, 14336, "bfloat16"), H200_SMS)[0]
    assert unsplit.tile == matmul.NARROW_16 and unsplit.split == 1
    narrow = matmul.split_plans(matmul.spec.bind(1024, 14336, "bfloat16"), H200_SMS)[0]
    assert narrow.tile == matmul.SPLIT_16 and narrow.split > 1


def test_the_narrow_tile_replaced_the_deep_one_where_the_deep_one_had_won() -> None:
    """The plan of then at M = 128 for narrow weights (64 x 128 x 128, 4 stages, split 2) had been the fastest
    128-deep candidate of ``gemm_decode_sweep_tilelang_mid``; in the narrow sweep its ``rule`` row is that plan,
    and NARROW_128 beat it there (above). This holds the two sweeps to the same cells: the mid sweep's M = 128 cells
    at n = 4096 are the narrow sweep's, and its other cells kept SPLIT_64 / SPLIT_128 faster than every 128-deep
    candidate."""
    cells = timed_cells("gemm_decode_sweep_tilelang_mid.json")
    assert len(cells) == 6, "the sweep covers M = 64, 128 at three weight shapes"
    assert set(cells) == set(timed_cells("gemm_decode_sweep_tilelang_narrow.json"))
    for (m, n, k), here in cells.items():
        plan = h200_plan(m, n, k)
        if plan.tile in (matmul.NARROW_64, matmul.NARROW_128):
            continue
        by_impl, timed = peers_and_tilings(here)
        assert plan.tile in (matmul.SPLIT_64, matmul.SPLIT_128), f"M={m} n={n} k={k}: {plan.tile}"
        assert by_impl["rule"] <= min(timed.values()), f"M={m} n={n} k={k}: a 128-deep tiling was faster"


def test_the_narrow_tiles_need_their_stages_of_room() -> None:
    """NARROW_64's six stages take 144 KiB and NARROW_128's five 160 KiB: a 99 KiB block (sm_86, sm_89) keeps the
    plans that fit there, whatever the weight, and an A100's 108 SMs make 4096 columns a wide weight (64 x 128
    tiles at 128 tokens fill more than half of them). On the H200 both narrow tiles run unsplit at n = 4096."""
    plans = matmul.split_plans(matmul.spec.bind(4096, 4096, "bfloat16"), 84, 99 * 1024)
    assert plans[1].tile.block_n == matmul.SPLIT_64.block_n and plans[-1].tile.block_k == 64  # fitted: fewer stages
    plans = matmul.split_plans(matmul.spec.bind(4096, 4096, "bfloat16"), 108, 163 * 1024)
    assert matmul.NARROW_64 not in {plan.tile for plan in plans} and plans[-1].tile != matmul.NARROW_128
    plans = matmul.split_plans(matmul.spec.bind(4096, 4096, "bfloat16"), H200_SMS)
    assert plans[0].tile == matmul.NARROW_16 and plans[0].split == 1
    assert plans[1].tile == matmul.NARROW_64 and plans[1].split == 1
    assert plans[-1].tile == matmul.NARROW_128 and plans[-1].split == 1


def test_the_plan_picks_a_measured_tiling_near_the_best_in_every_swept_cell() -> None:
    """In each (M, n, k) cell up to 16 tokens, the plan for M's bucket was timed there: within 5 % of the cell's
    fastest candidate, faster than the rule the sweep ran against (its ``rule`` row: a 16 x 64 / 64 x 128 split-K
    pair whose slices a bandwidth model chose) and at least cuBLAS's speed (the issue's goal). (Its M = 128 cells
    set the 64 x 256 plan of then, SPLIT_128_LOW_SMEM now: the test above judges today's.)"""
    cells = timed_cells(SWEEP.name)
    assert len(cells) == 9, "the sweep covers M = 1, 16, 128 at three weight shapes"
    for (m, n, k), here in cells.items():
        if m > 16:
            continue
        by_impl, timed = peers_and_tilings(here, keep=lambda row: "split" in row)
        plan = h200_plan(m, n, k)
        if plan.tile == matmul.NARROW_16:
            continue  # judged by its own sweep (the test above)
        key = plan_key(plan)
        assert key in timed, f"M={m} n={n} k={k}: the plan {key} was not in the sweep"
        best = min(timed.values())
        assert timed[key] <= best * 1.05, f"M={m} n={n} k={k}: {timed[key]:.2f} µs against the best {best:.2f}"
        assert timed[key] < by_impl["rule"], f"M={m} n={n} k={k}: no faster than the old rule"
        if m <= 16:
            assert timed[key] <= by_impl["cuBLAS"], f"M={m} n={n} k={k}: slower than cuBLAS"


@given(
    n=st.integers(1, 30000),
    k=st.integers(1, 30000),
    sm_count=st.sampled_from([28, 46, 84, 108, 132, 170]),
    shared_memory=st.sampled_from([99 * 1024, 163 * 1024, 227 * 1024]),
)
def test_every_plan_fits_and_covers_k_once(n: int, k: int, sm_count: int, shared_memory: int) -> None:
    for plan in matmul.split_plans(matmul.spec.bind(n, k, "bfloat16"), sm_count, shared_memory):
        tile = plan.tile
        # a pipeline that fits the device's shared memory (two stages at least)
        assert tile.stages >= 2
        assert tile.shared_bytes(2, 4) <= shared_memory - matmul.EPILOGUE_RESERVE or tile.stages == 2
        # whole k-steps a slice, every slice non-empty, the slices cover k exactly once
        steps = -(-k // tile.block_k)
        assert plan.split >= 1 and plan.steps * plan.split >= steps > plan.steps * (plan.split - 1)
        if plan.split > 1:
            assert plan.steps >= matmul.DEFAULT_TABLE.min_slice_steps
            # no more blocks than one wave of the device's block slots
            slots = sm_count * max(
                1, min(matmul.DEFAULT_TABLE.max_blocks_per_sm, shared_memory // tile.shared_bytes(2, 4))
            )
            assert tile.tiles(plan.max_m, n) * plan.split <= slots


def test_the_large_tile_led_the_prefill_sweep_and_fits_a_hopper() -> None:
    """``LARGE`` is the tiling of ``gemm_large_sweep_tilelang`` with the best geometric mean over its seven
    shapes (M = 1024, 8192 and 8192^3), and better than the tile the sweep's rule used at every shape; with its
    shared-memory epilogue it needs 208 KiB, which a Hopper has and a 99 KiB GPU does not (LARGE_LOW_SMEM)."""
    import math

    rows = json.loads((SWEEP.with_name("gemm_large_sweep_tilelang.json")).read_text())["rows"]
    by_tiling: dict[tuple, dict[tuple[int, int, int], float]] = {}
    for row in rows:
        if row.get("us") and row["candidate"]:
            c = row["candidate"]
            key = (
                c["block_m"],
                c["block_n"],
                c["block_k"],
                c["num_stages"],
                32 * c["num_warps"],
                c["warp_policy"],
                c["shared_epilogue"],
            )
            by_tiling.setdefault(key, {})[(row["m"], row["n"], row["k"])] = row["vs_cublas"]
    complete = {key: cells for key, cells in by_tiling.items() if len(cells) == 7}

    def geomean(cells: dict) -> float:
        return math.exp(sum(math.log(v) for v in cells.values()) / len(cells))

    best = max(complete, key=lambda key: geomean(complete[key]))
    large = matmul.LARGE
    assert best == (
        large.block_m,
        large.block_n,
        large.block_k,
        large.stages,
        large.threads,
        large.warp_policy,
        large.shared_epilogue,
    )
    rule = {(row["m"], row["n"], row["k"]): row["vs_cublas"] for row in rows if row["impl"] == "rule"}
    assert all(complete[best][shape] > rule[shape] for shape in rule)
    assert matmul.tiles_for("bfloat16", 227 * 1024)[1] == large
    assert matmul.tiles_for("bfloat16", 99 * 1024)[1] == matmul.LARGE_LOW_SMEM


@pytest.mark.parametrize(
    ("n", "k"), [(1, 16), (16, 1), (8, 64), (4100, 4096), (4096, 4100), (4096, 4096), (1920, 4160), (14336, 8)]
)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_full_row_large_tile_is_built_only_where_tma_keeps_the_producer_warpgroup(n, k, dtype) -> None:
    """One m64n256 ``wgmma`` needs more than 128 registers a thread. Without TMA (rows that are not 16-byte
    multiples) TileLang launches 512 threads of 128 registers, and ptxas refused the full-row tile there
    (``matmul_tl(n=1, k=16, dtype=torch.float16)``, H200 conformance): the large program the factory builds is
    full-row only where its lowering for sm_90a is warp-specialized (a producer warpgroup, registers moved to the
    consumers)."""
    import tilelang
    import torch
    from tvm.target import Target as TvmTarget

    from lazyops.specs.matmul import spec

    config = spec.bind(n, k, getattr(torch, dtype))
    (tile,) = [tile for (name, tile) in matmul.programs(config, 227 * 1024) if name == "large"]
    hopper = TvmTarget({"kind": "cuda", "arch": "sm_90a"})
    with hopper:
        source = tilelang.lower(matmul.matmul_program(n, k, dtype, tile), target=hopper).kernel_source
    specialized = "warpgroup_reg_alloc" in source
    assert tile.warp_policy == ("full_row" if specialized else "square")
    assert tile.shared_epilogue == specialized
    if n % 8 == 0 and k % 8 == 0:
        assert tile == matmul.LARGE
