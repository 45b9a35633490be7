"""The cupy backend's tunable parameters without a GPU: declarations, defaults, constraints, geometry.

Everything here is the pure-Python planning math (no cupy import); the
kernels' agreement with the reference for every configuration is in
tests/test_gpu.py (``-k tunable``), which needs a device.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

import convsuite as cs
from convsuite.backends import _cupy_runtime as rt
from convsuite.backends.cupy import _catalog as catalog
from convsuite.backends.cupy._catalog import DEFINES, KERNELS, OVERRIDABLE
from convsuite.backends.cupy.algorithms import _common as common
from convsuite.backends.cupy.algorithms import conv1d, conv2d, tf32x3_image
from convsuite.backends.cupy.algorithms import implicit_gemm as igemm
from convsuite.backends.cupy.algorithms.conv2d import REGISTER_TILES
from convsuite.backends.cupy.algorithms.pointwise import POINTWISE_TILES
from convsuite.backends.cupy_backend import CupyBackend

TUNABLE = {name: r for name, r in catalog.RECORDS.items() if r.tunables}
FA19_GRID = {"tile_w": (4, 8, 12, 16, 24, 32), "tile_h": (1, 2, 4, 8, 12, 16, 24, 32)}


def _spec(x_shape, w_shape, dtype=np.float32, **kw):
    """The validated spec of a call with these shapes (no data: np.empty)."""
    return cs.explain(np.empty(x_shape, dtype), np.empty(w_shape, dtype), backend="numpy", **kw).spec


def _specs():
    """A deterministic spread of cases: 1-D, odd sizes, strides, dilations, groups, depthwise, 1x1, both dtypes."""
    rng = np.random.default_rng(16)
    specs = [
        _spec((2, 1, 48, 48), (12, 1, 5, 5)),  # ECE408 conv1-like
        _spec((2, 12, 22, 22), (24, 12, 5, 5)),  # ECE408 conv2-like
        _spec((1, 1, 1000), (1, 1, 7)),  # 1-D: one output row
        _spec((1, 3, 1, 300), (4, 3, 1, 3)),
        _spec((2, 16, 20, 20), (16, 1, 3, 3), groups=16),
        _spec((2, 16, 21, 17), (32, 1, 5, 5), np.float64, groups=16, stride=2, padding=2),
        _spec((2, 96, 14, 14), (24, 96, 1, 1)),
        _spec((2, 24, 15, 13), (144, 24, 1, 1), np.float64),
        _spec((2, 64, 20, 20), (200, 64, 3, 3), padding=1),
        _spec((1, 2, 300, 300), (3, 2, 3, 3)),
    ]
    for _ in range(40):
        g = int(rng.choice([1, 2, 3]))
        cg, mg = int(rng.integers(1, 5)), int(rng.integers(1, 40))
        k = (int(rng.integers(1, 8)), int(rng.integers(1, 8)))
        d = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        size = (int(rng.integers(d[0] * (k[0] - 1) + 1, 70)), int(rng.integers(d[1] * (k[1] - 1) + 1, 70)))
        dtype = np.float32 if rng.random() < 0.5 else np.float64
        specs.append(
            _spec(
                (int(rng.integers(1, 4)), g * cg, *size),
                (g * mg, cg, *k),
                dtype,
                groups=g,
                stride=(int(rng.integers(1, 4)), int(rng.integers(1, 4))),
                dilation=d,
                padding=int(rng.integers(0, 3)),
            )
        )
    for _ in range(20):  # 1-D
        g, k, d = int(rng.choice([1, 2])), int(rng.integers(1, 40)), int(rng.integers(1, 4))
        cg, dtype = int(rng.integers(1, 3)), np.float32 if rng.random() < 0.5 else np.float64
        specs.append(
            _spec(
                (int(rng.integers(1, 3)), g * cg, int(rng.integers(d * (k - 1) + 1, 5000))),
                (g * int(rng.integers(1, 5)), cg, k),
                dtype,
                groups=g,
                stride=int(rng.choice([1, 1, 2])),
                dilation=d,
                padding="same" if rng.random() < 0.5 else 0,
            )
        )
    return specs


SPECS = _specs()


def _runs(record, spec, direction):
    return direction in record.directions and spec.ndim in record.ndims


@pytest.mark.parametrize("name", sorted(TUNABLE))
def test_tunables_are_well_formed(name):
    """Names unique, values increasing and of one type, a doc line, defaults resolve on every case."""
    record = TUNABLE[name]
    names = [t.name for t in record.tunables]
    assert len(set(names)) == len(names)
    for t in record.tunables:
        assert t.values and all(type(v) is type(t.values[0]) for v in t.values), t
        assert list(t.values) == sorted(set(t.values)), f"{t.name}: values not strictly increasing"
        assert t.doc, t.name
    checked = 0
    for spec in SPECS:
        for direction in record.directions:
            if not _runs(record, spec, direction):
                continue
            defaults = record.defaults(spec, direction)
            for t in record.tunables:  # a listed value, or the rule's own value (accepted on its case)
                assert type(defaults[t.name]) is type(t.values[0]), (t.name, defaults[t.name], spec)
                assert t.values[0] <= defaults[t.name] <= max(t.values[-1], defaults[t.name]), (t.name, spec)
            assert record.resolve(spec, direction, None) == defaults
            assert record.resolve(spec, direction, defaults) == defaults
            checked += 1
    assert checked >= 20


def test_the_expected_records_are_tunable():
    """What the kernels allow today (fused_gemm: the slice depth only, its loaders are fixed at 64x64 tiles)."""
    assert {n: [t.name for t in r.tunables] for n, r in TUNABLE.items()} == {
        "tiled_shared": ["tile_w", "tile_h"],
        "register_tiled": ["mt", "block_w", "px"],
        "fused_gemm": ["bk"],
        "igemm_big": ["bm", "gather"],
        "tf32x3": ["mma", "bm", "blocks", "stages", "gather"],
        "pointwise": ["mt"],
        "depthwise": ["px", "py"],
        "blocked": ["v", "persistent"],
    }


def test_fa19_grid_is_within_the_values_and_runs_on_the_seed_layers():
    """The FA19 report's tile sweep is a grid of tiled_shared, and every pair fits both ECE408-like layers."""
    record = catalog.RECORDS["tiled_shared"]
    configs = record.configurations(FA19_GRID)
    assert len(configs) == 48
    for spec in SPECS[:2]:
        for params in configs:
            assert record.can_run(spec, "forward", params) is True, (params, spec)


def test_defaults_reproduce_the_hand_rule():
    """Worked by hand from the rule (as wide as the row allows, <= 32 wide, then the rest of 256 threads)."""
    conv1 = SPECS[0]  # 44 x 44 outputs, 12 channels
    assert catalog.RECORDS["tiled_shared"].defaults(conv1, "forward") == {"tile_w": 22, "tile_h": 11}
    assert conv2d._tile_geometry(conv1, "tiled_shared") == dict(block=(22, 11), tiles=8, smem=(15 * 26) * 4)
    assert catalog.RECORDS["register_tiled"].defaults(conv1, "forward") == {"mt": 12, "block_w": 11, "px": 4}
    # 11 threads x 4 outputs = 44 wide, 22 tall; two stages of a 26 x 48 patch plus 12 filters of 25 taps
    stages = 2 * (26 * 48 + 12 * 25) * 4
    assert conv2d._tile_geometry(conv1, "register_tiled") == dict(block=(11, 22), tiles=2, smem=stages)
    one_row = SPECS[2]  # 994 outputs in one row: up to 256 threads wide
    assert catalog.RECORDS["tiled_shared"].defaults(one_row, "forward") == {"tile_w": 249, "tile_h": 1}
    assert catalog.RECORDS["register_tiled"].defaults(one_row, "forward") == {"mt": 4, "block_w": 249, "px": 4}
    wide = SPECS[8]  # 64 -> 200 channels: 128-row tiles, whole chunks of 8 input channels
    assert catalog.RECORDS["igemm_big"].defaults(wide, "forward") == {"bm": 128, "gather": "chunked"}
    assert catalog.RECORDS["igemm_big"].defaults(SPECS[1], "forward") == {"bm": 64, "gather": "chunked"}  # 12 -> 24
    assert catalog.RECORDS["pointwise"].defaults(SPECS[6], "forward") == {"mt": 24}
    assert catalog.RECORDS["pointwise"].defaults(SPECS[7], "forward") == {"mt": 16}  # float64 stops at 16
    assert catalog.RECORDS["depthwise"].defaults(SPECS[4], "forward") == {
        "px": DEFINES["CS_DW_PX"],
        "py": DEFINES["CS_DW_PY"],
    }


def test_explicit_geometry_follows_the_parameters():
    """A chosen block is the launch block; register_tiled's height is the rule's for the chosen width."""
    conv1 = SPECS[0]
    geo = conv2d._tile_geometry(conv1, "tiled_shared", {"tile_w": 16, "tile_h": 8})
    assert geo == dict(block=(16, 8), tiles=3 * 6, smem=((8 - 1) + 5) * ((16 - 1) + 5) * 4)
    geo = conv2d._tile_geometry(conv1, "register_tiled", {"mt": 4, "block_w": 8, "px": 2})
    # 8 threads x 2 = 16 wide, height _balanced(44, 32) = 22: patch 26 x 20 plus 4 filters
    assert geo == dict(block=(8, 22), tiles=2 * 3, smem=2 * (26 * 20 + 4 * 25) * 4)


def test_constraints_refuse_with_a_reason():
    """Threads per block, shared memory, grid limit, accumulator registers, directions: each refusal says why."""
    backend = CupyBackend()
    conv1 = SPECS[0]
    why = backend.can_run(conv1, "tiled_shared", "forward", {"tile_w": 32, "tile_h": 64})
    assert why == "tile_h=64, tile_w=32: a 32x64 block is 2048 threads (at most 1024)"
    big = SPECS[9]  # 298 x 298 outputs
    why = backend.can_run(big, "tiled_shared", "forward", {"tile_w": 1, "tile_h": 1})
    assert why == f"tile_h=1, tile_w=1: {298 * 298} output tiles per plane exceed the grid's y limit (65535)"
    f64 = _spec((2, 1, 48, 48), (24, 1, 5, 5), np.float64)
    # 256 threads x 8 outputs: a 5 x 2052 float64 patch (82080 bytes) and 24 filters of 25 taps (4800)
    why = backend.can_run(f64, "register_tiled", "forward", {"block_w": 256, "px": 8})
    assert why == "block_w=256, mt=24, px=8: the input patch (and filters) need 173760 bytes of shared memory (> 49152)"
    why = backend.can_run(f64, "register_tiled", "forward", {"mt": 24, "px": 8})
    assert "384 32-bit registers" in why and "mt=24" in why
    assert backend.can_run(f64, "register_tiled", "forward", {"mt": 24, "px": 4}) is True
    assert backend.can_run(SPECS[7], "pointwise", "forward", {"mt": 32}) == (
        "mt=32: 32 x 4 float64 accumulators take 256 32-bit registers per thread (at most 192; more would spill)"
    )
    assert backend.can_run(SPECS[6], "pointwise", "forward", {"mt": 32}) is True
    dw = SPECS[4]
    assert backend.can_run(dw, "depthwise", "forward", {"px": 8, "py": 4}) is True
    why = backend.can_run(dw, "depthwise", "backward", {"px": 8})
    assert isinstance(why, str) and "backward" in why and "px=8" in why
    assert backend.can_run(dw, "depthwise", "backward") is True


def test_blocked_shared_memory_follows_v():
    """One tile per block: 256 v outputs plus the halo and the mask. Persistent: two stages of
    window, slack and mask where they fit, else one. A long dilated mask refuses large v only."""
    spec = _spec((1, 1, 200_000), (1, 1, 301), np.float64, dilation=10)
    record = catalog.RECORDS["blocked"]
    assert conv1d._blocked_smem(spec, 9, 0) == (2304 + 3000 + 8 + 301) * 8
    # window 2304 + 3000 rounded up with a 16-byte piece of slack (5306), mask 301 -> 302: one stage
    assert conv1d._blocked_stage_elements(spec, 9) == 5306 + 302
    assert conv1d._blocked_smem(spec, 9, 1) == 5608 * 8  # 44864 bytes: two would pass 48 KiB
    # one input channel, float64, but only one stage fits: nothing to overlap, one tile per block
    assert record.defaults(spec, "forward")["persistent"] == 0
    for persistent in (0, 1):
        assert record.can_run(spec, "forward", {"v": 9, "persistent": persistent}) is True
    why = record.can_run(spec, "forward", {"v": 15, "persistent": 1})
    assert why == f"v=15: tile, halo and mask need {(6842 + 302) * 8} bytes of shared memory (> 49152)"
    why = record.can_run(spec, "forward", {"v": 15, "persistent": 0})
    assert why == f"v=15: tile, halo and mask need {(3840 + 3000 + 8 + 301) * 8} bytes of shared memory (> 49152)"
    assert record.can_run(SPECS[2], "forward", {"v": 15}) is True
    assert record.defaults(SPECS[2], "forward")["v"] == DEFINES["CS_BLOCKED_V"]
    # float32, K=31: window 2304 + 30 -> 2340, mask 32, two stages
    short = _spec((1, 1, 100_000), (1, 1, 31), np.float32)
    assert conv1d._blocked_smem(short, 9, 1) == 2 * (2340 + 32) * 4


def test_blocked_v_rule():
    """blocked's outputs per thread: 11 on long masks (from BLOCKED_PERSISTENT_FROM taps), 9 below, either grid."""
    record = catalog.RECORDS["blocked"]
    for k, dtype, want in [
        (3, np.float32, DEFINES["CS_BLOCKED_V"]),
        (conv1d.BLOCKED_PERSISTENT_FROM - 1, np.float32, DEFINES["CS_BLOCKED_V"]),
        (conv1d.BLOCKED_PERSISTENT_FROM, np.float32, conv1d.BLOCKED_LONG_MASK_V),
        (31, np.float64, conv1d.BLOCKED_LONG_MASK_V),
    ]:
        spec = _spec((2, 1, 10**5), (4, 1, k), dtype)
        assert record.defaults(spec, "forward")["v"] == want, (k, dtype)
        assert record.can_run(spec, "forward", record.defaults(spec, "forward")) is True
    assert conv1d.BLOCKED_LONG_MASK_V in OVERRIDABLE["CS_BLOCKED_V"][1]
    # float64, 301 taps dilated 11: a tile of 11 outputs per thread needs 51400 bytes, of 9 47304
    spec = _spec((1, 1, 200_000), (1, 1, 301), np.float64, dilation=11)
    assert conv1d._blocked_tile_smem(spec, 11) > common.SMEM_LIMIT >= conv1d._blocked_tile_smem(spec, 9)
    assert record.defaults(spec, "forward")["v"] == DEFINES["CS_BLOCKED_V"]
    assert record.can_run(spec, "forward") is True
    # float64, 129 taps: two stages fit at 9 outputs per thread (41024 bytes), not at 11 (49216):
    # 9, so that the persistent grid keeps its overlap
    spec = _spec((1, 1, 10**6), (1, 1, 129), np.float64)
    assert 2 * conv1d._blocked_stage_elements(spec, 11) * 8 > common.SMEM_LIMIT
    assert 2 * conv1d._blocked_stage_elements(spec, 9) * 8 <= common.SMEM_LIMIT
    assert record.defaults(spec, "forward") == {"v": DEFINES["CS_BLOCKED_V"], "persistent": 1}


def test_blocked_persistent_rule():
    """The persistent, pipelined grid for one input channel with enough work per output; else one tile per block."""
    record = catalog.RECORDS["blocked"]
    cases = [
        (((1, 1, 10**6), (1, 1, 3), {}), np.float32, 0),  # a compiled width, float32: too little to hide
        (((1, 1, 10**6), (1, 1, 9), {}), np.float32, 0),
        (((1, 1, 10**6), (1, 1, conv1d.BLOCKED_PERSISTENT_FROM + 15), {}), np.float32, 1),  # 31: compiled, long
        (((1, 1, 10**6), (1, 1, 8), {}), np.float32, 1),  # not compiled in: the tap loop is not unrolled
        (((1, 1, 10**6), (1, 1, 5), {"dilation": 3}), np.float32, 1),  # the dilated path
        (((1, 1, 10**6), (1, 1, 3), {}), np.float64, 1),
        (((4, 8, 10**4), (8, 1, 31), {"groups": 8}), np.float32, 1),  # depthwise: one input channel
        (((4, 64, 10**4), (64, 8, 31), {"groups": 8}), np.float32, 0),  # a stage per input channel
        (((4, 64, 10**4), (64, 64, 9), {}), np.float64, 0),
    ]
    for (x_shape, w_shape, kw), dtype, want in cases:
        spec = _spec(x_shape, w_shape, dtype, **kw)
        assert record.defaults(spec, "forward")["persistent"] == want, (x_shape, w_shape, kw, dtype)


def test_case_limits_still_come_first():
    """A case the algorithm declines whatever its parameters says so before any parameter is judged."""
    backend = CupyBackend()
    why = backend.can_run(SPECS[0], "pointwise", "forward", {"mt": 8})
    assert why == "pointwise needs a 1x1 kernel; got (5, 5)"
    why = backend.can_run(SPECS[7], "igemm_big", "forward", {"bm": 64})
    assert why.startswith("igemm_big is float32 only")


def test_bad_parameters_raise_naming_what_is_accepted():
    """Unknown names and values outside the list are errors, from can_run and from plan (before any device work)."""
    backend = CupyBackend()
    conv1 = SPECS[0]
    with pytest.raises(ValueError, match=r"'tiled_shared' has no tunable parameter 'tile_q' \(its parameters: tile_w"):
        backend.can_run(conv1, "tiled_shared", "forward", {"tile_q": 4})
    with pytest.raises(ValueError, match=r"'register_tiled' parameter 'mt' accepts 4, 8, 12, 16, 24; got 5"):
        backend.can_run(conv1, "register_tiled", "forward", {"mt": 5})
    with pytest.raises(ValueError, match=r"'register_tiled' parameter 'px' accepts 1, 2, 4, 8; got 4.0"):
        backend.plan(conv1, "register_tiled", "forward", {"px": 4.0})
    with pytest.raises(ValueError, match=r"'fused_gemm' has no tunable parameter 'bm' \(its parameters: bk\)"):
        backend.plan(SPECS[8], "fused_gemm", "forward+relu", {"bm": 64})
    with pytest.raises(ValueError, match=r"'fused_gemm' parameter 'bk' accepts 8, 16, 32; got 12"):
        catalog.plan_forward_activation(SPECS[8], "fused_gemm", "relu", {"bk": 12})
    with pytest.raises(ValueError, match=r"'igemm_big' parameter 'bm' accepts 64, 128; got 32"):
        catalog.plan_forward_activation(SPECS[8], "igemm_big", "relu6", {"bm": 32})
    with pytest.raises(ValueError, match=r"'tf32x3' parameter 'blocks' accepts 0, 3, 4; got 1"):
        backend.plan(SPECS[8], "tf32x3", "forward", {"blocks": 1})
    for bad in (1, 7, 4.0, "4", None):
        with pytest.raises(ValueError, match=rf"'tf32x3' parameter 'stages' accepts 2, 3, 4, 5, 6; got {bad!r}"):
            backend.plan(SPECS[8], "tf32x3", "forward", {"stages": bad})
    with pytest.raises(ValueError, match=r"'tf32x3' parameter 'gather' accepts 'chunked', 'table'; got 'taps'"):
        backend.plan(SPECS[8], "tf32x3", "backward", {"gather": "taps"})
    one_d = SPECS[2]  # (1, 1, 1000) * (1, 1, 7)
    for bad in (2, True, "1"):
        with pytest.raises(ValueError, match=rf"'blocked' parameter 'persistent' accepts 0, 1; got {bad!r}"):
            backend.plan(one_d, "blocked", "forward", {"persistent": bad})
    with pytest.raises(
        ValueError, match=r"'blocked' has no tunable parameter 'pipelined' \(its parameters: v, persistent\)"
    ):
        backend.can_run(one_d, "blocked", "forward", {"pipelined": 1})
    with pytest.raises(ValueError, match=r"'igemm_big' parameter 'gather' accepts 'chunked', 'table'; got 1"):
        catalog.plan_forward_activation(SPECS[8], "igemm_big", "relu", {"gather": 1})
    with pytest.raises(ValueError, match=r"'igemm_big' parameter 'gather' accepts 'chunked', 'table'; got None"):
        backend.can_run(SPECS[8], "igemm_big", "forward", {"gather": None})
    with pytest.raises(
        ValueError, match=r"`activation` of a fused epilogue must be one of 'relu', 'relu6'; got 'tanh'"
    ):
        catalog.plan_forward_activation(SPECS[8], "fused_gemm", "tanh")
    with pytest.raises(ValueError, match=r"'register_tiled' fuses no activation into its kernel; those that do: "):
        catalog.plan_forward_activation(conv1, "register_tiled", "relu6")


def test_template_and_define_values_are_compiled():
    """Every template value a tunable offers is instantiated; every -D value is one the sources compile with."""
    assert catalog.RECORDS["register_tiled"].tunables[0].values == REGISTER_TILES
    assert catalog.RECORDS["pointwise"].tunables[0].values == POINTWISE_TILES
    big = [k for k in KERNELS["implicit_gemm_big.cu"] if k.startswith("conv2d_igemm_fwd@")]
    assert set(catalog.RECORDS["igemm_big"].tunables[0].values) == {int(k.split("@")[1].split(",")[0]) for k in big}
    tc = [k for k in KERNELS["implicit_gemm_tf32x3.cu"] if k.startswith("conv2d_tf32x3_fwd@")]
    tx_rows = next(t for t in catalog.RECORDS["tf32x3"].tunables if t.name == "bm").values
    assert set(tx_rows) == {int(k.split("@")[1].split(",")[0]) for k in tc}
    wgrad = {int(k.split("@")[1]) for k in KERNELS["implicit_gemm_tf32x3.cu"] if k.startswith("conv2d_tf32x3_wgrad@")}
    assert wgrad == set(igemm.TF32X3_WGRAD_BLOCKS_PER_SM)
    for bm in tx_rows:
        assert {igemm.tf32x3_wgrad_rows(mg, bm) for mg in range(1, 300)} <= wgrad
    assert catalog.RECORDS["register_tiled"].tunables[2].values == OVERRIDABLE["CS_RT_PX"][1]
    assert catalog.RECORDS["blocked"].tunables[0].values == OVERRIDABLE["CS_BLOCKED_V"][1]
    assert all(v % 2 == 1 for v in OVERRIDABLE["CS_BLOCKED_V"][1])
    assert catalog.RECORDS["fused_gemm"].tunables[0].values == OVERRIDABLE["CS_GEMM_BK"][1]
    assert [t.values for t in catalog.RECORDS["depthwise"].tunables] == [
        OVERRIDABLE["CS_DW_PX"][1],
        OVERRIDABLE["CS_DW_PY"][1],
    ]


def test_tf32x3_weight_gradient_tiles_hold_the_channels_without_idle_rows():
    """16 and 32 rows for thin layers (ECE408: 12-24 channels), never more rows than ``bm`` allows."""
    rows = igemm.tf32x3_wgrad_rows
    assert [rows(mg, 64) for mg in (1, 12, 16, 17, 24, 32, 33, 64, 65, 300)] == [16, 16, 16, 32, 32, 32, 64, 64, 64, 64]
    assert [rows(mg, 128) for mg in (16, 24, 64, 65, 300)] == [16, 32, 64, 128, 128]


def test_tf32x3_image_geometry_and_tap_table():
    """The padded image rows/columns the outputs read, warps per pixel-tile pairs, shared bytes, and
    every tap's offset (past the reduction: 0), against a direct walk over (c, p, q)."""
    fa19 = _spec((10000, 12, 22, 22), (24, 12, 5, 5))
    geo = tf32x3_image.tf32x3_image_geometry(fa19)
    # 324 pixels: 21 tiles of 16, 11 pairs, one warp each; 300 taps in 38 steps; 24 channels in 3 tiles
    assert geo == {
        "rows": 22,
        "cols": 22,
        "ksteps": 38,
        "nt": 3,
        "warps": 11,
        "smem": 38 * 3 * 512 + 38 * 32 + 8 * 5808,
    }
    # 34 x 34 = 1156 pixels: 37 pairs over 4 rounds of 10 warps (at most 12: two blocks an SM)
    assert tf32x3_image.tf32x3_image_geometry(_spec((8, 4, 40, 40), (16, 4, 7, 7)))["warps"] == 10
    cases = [
        ((2, 5, 17, 19), (13, 5, 3, 3), dict(stride=2, dilation=2, padding=((2, 0), (1, 3)))),
        ((1, 7, 12, 30), (9, 7, 1, 5), dict(stride=(1, 3), padding=(0, 2))),
        ((2, 8, 300), (16, 8, 5), dict(padding="same")),
    ]
    for x_shape, w_shape, kw in [((3, 12, 22, 22), (24, 12, 5, 5), {}), *cases]:
        spec = _spec(x_shape, w_shape, **kw).as_2d()
        geo = tf32x3_image.tf32x3_image_geometry(spec)
        (Ho, Wo), (KH, KW), (sh, sw), (dh, dw) = spec.out_size, spec.kernel_size, spec.stride, spec.dilation
        rows, cols = geo["rows"], geo["cols"]
        # the last output's window ends on the last padded row and column
        assert (Ho - 1) * sh + (KH - 1) * dh == rows - 1 and (Wo - 1) * sw + (KW - 1) * dw == cols - 1
        assert rows <= spec.in_size[0] + sum(spec.padding[0]) and cols <= spec.in_size[1] + sum(spec.padding[1])
        assert geo["nt"] * 8 >= spec.out_channels > (geo["nt"] - 1) * 8
        assert (
            geo["warps"] <= tf32x3_image.TF32X3_IMAGE_MAX_WARPS == 12
            and geo["warps"] * 32 * math.ceil(math.ceil(Ho * Wo / 32) / geo["warps"]) >= Ho * Wo
        )
        table = tf32x3_image.tf32x3_image_taps(spec)
        kd = spec.channels_per_group * KH * KW
        assert table.shape == (geo["ksteps"], 4, 2) and table.dtype == np.int32 and geo["ksteps"] * 8 >= kd
        taps = [(c, p, q) for c in range(spec.in_channels) for p in range(KH) for q in range(KW)]
        for k in range(geo["ksteps"] * 8):
            step, t, half = k // 8, k % 4, (k % 8) // 4
            want = 0  # past the reduction: any element of the image (its weight is zero)
            if k < kd:
                c, p, q = taps[k]
                want = c * rows * cols + p * dh * cols + q * dw
            assert table[step, t, half] == want, (spec, k)


def test_tf32x3_image_declines_without_a_gpu_on_the_case_alone(monkeypatch):
    """What the spec decides (groups, channels, dtype, reduction, shared memory) is said without a device."""
    from convsuite.backends import _cupy_runtime as rt

    monkeypatch.setattr(rt, "compute_capability", lambda: None)  # as on a machine without a GPU
    monkeypatch.setattr(rt, "shared_memory_optin", lambda: None)
    backend = CupyBackend()
    assert backend.can_run(_spec((4, 12, 22, 22), (24, 12, 5, 5)), "tf32x3_image", "forward") is True
    assert "groups=1" in backend.can_run(_spec((2, 8, 9, 9), (8, 4, 3, 3), groups=2), "tf32x3_image", "forward")
    assert "32 output channels" in backend.can_run(_spec((2, 8, 9, 9), (40, 8, 3, 3)), "tf32x3_image", "forward")
    big = _spec((2, 64, 56, 56), (32, 64, 3, 3), padding=1)
    assert "shared memory" in backend.can_run(big, "tf32x3_image", "forward")
    assert "tf32x3_image" in catalog.FUSED_ACTIVATION
    names = {k for k in KERNELS["tf32x3_image.cu"]}
    assert names == {f"conv2d_tf32x3_image@{nt},{act}" for nt in (1, 2, 3, 4) for act in (0, 1, 2)}
    assert tf32x3_image.TF32X3_IMAGE_MAX_CHANNELS == 8 * 4


def test_every_configuration_the_constraint_admits_has_a_consistent_launch():
    """Over every configuration on a few cases: admitted ones launch within the limits the constraint states."""
    for spec in (SPECS[0], SPECS[1], SPECS[5]):
        record = catalog.RECORDS["register_tiled"]
        grid = {"block_w": (1, 2, 12, 16, 32, 64, 256)}
        for params in record.configurations(grid):
            ok = record.can_run(spec, "forward", params) is True
            geo = conv2d._tile_geometry(spec.as_2d(), "register_tiled", params)
            (bx, by) = geo["block"]
            fits = (
                bx * by <= 1024
                and geo["smem"] <= 48 * 1024
                and geo["tiles"] <= 65535
                and params["mt"] * params["px"] * spec.itemsize // 4 <= 192
            )
            assert ok == fits, (params, geo)
            if ok:  # the tiles cover the output: bx*px*ceil(Wo/(bx*px)) >= Wo, likewise H
                Ho, Wo = spec.as_2d().out_size
                tiles_w, tiles_h = -(-Wo // (bx * params["px"])), -(-Ho // by)
                assert tiles_w * tiles_h == geo["tiles"]
        for tw, th in itertools.product((1, 12, 32, 256), (1, 4, 64)):
            verdict = catalog.RECORDS["tiled_shared"].can_run(spec, "forward", {"tile_w": tw, "tile_h": th})
            assert (verdict is True) == (
                tw * th <= 1024
                and conv2d._check_tiled(spec.as_2d(), "tiled_shared", {"tile_w": tw, "tile_h": th}) is True
            )


def test_planning_math_imports_no_cupy():
    """Defaults, constraints and geometry run in a process where cupy was never imported."""
    code = (
        "import sys, numpy as np, convsuite as cs\n"
        "from convsuite.backends.cupy import _catalog as a\n"
        "from convsuite.backends.cupy.algorithms import conv2d\n"
        "s = cs.explain(np.empty((2, 1, 48, 48), np.float32), np.empty((12, 1, 5, 5), np.float32),"
        " backend='numpy').spec\n"
        "for n, r in a.RECORDS.items():\n"
        "    if r.tunables:\n"
        "        [r.can_run(s, 'forward', p) for p in r.configurations()[:200]]\n"
        "conv2d._tile_geometry(s, 'register_tiled')\n"
        "assert 'cupy' not in sys.modules, 'cupy imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_pinned_parameter_moves_the_defaults_that_follow_it():
    """tiled_shared's tile_h and register_tiled's block_w are hand rules of tile_w and px: pinning those gives
    the rule's value for the pinned one (not for the default), declared order kept, defaults unchanged."""
    spec = SPECS[0]
    record = catalog.RECORDS["tiled_shared"]
    own = record.defaults(spec, "forward")
    for tile_w in (4, 8, 32):
        got = record.resolve(spec, "forward", {"tile_w": tile_w})
        assert list(got) == ["tile_w", "tile_h"]
        assert got == {"tile_w": tile_w, "tile_h": conv2d._block_height(spec.as_2d(), tile_w)}
    assert record.resolve(spec, "forward", {"tile_h": 2}) == {"tile_w": own["tile_w"], "tile_h": 2}
    assert record.resolve(spec, "forward", None) == own == conv2d._tiled_params(spec.as_2d(), "tiled_shared")
    rt = catalog.RECORDS["register_tiled"]
    for px in (1, 2, 8):  # block_w is declared before px, and follows it
        got = rt.resolve(spec, "forward", {"px": px})
        assert list(got) == ["mt", "block_w", "px"]
        assert got["block_w"] == conv2d._block_width(spec.as_2d(), px) and got["px"] == px
    assert rt.resolve(spec, "forward", None) == conv2d._tiled_params(spec.as_2d(), "register_tiled")


def test_tf32x3_checks_the_sums_of_each_direction():
    """Forward: products per output; backward also the pixels each weight-gradient entry sums (B*Ho*Wo)."""
    record = catalog.RECORDS["tf32x3"]
    few_pixels = _spec((1, 64, 6, 6), (64, 64, 3, 3))  # 576 products per output, but 16 output pixels
    assert record.can_run(few_pixels, "forward") is True
    why = record.can_run(few_pixels, "backward")
    assert "reduction of 16 pixels summed per weight-gradient entry" in why and "igemm_big" in why
    enough = _spec((1, 64, 8, 8), (64, 64, 3, 3))  # 36 pixels
    assert record.can_run(enough, "backward") is True
    short = _spec((64, 3, 56, 56), (64, 3, 3, 3), padding=1)  # 27 products per output
    for direction in ("forward", "backward"):
        assert "reduction of 27 products per output" in record.can_run(short, direction)


@pytest.mark.parametrize("activation", [None, "relu", "relu6"])
def test_tf32x3_register_budget_reaches_every_kernel_it_selects(monkeypatch, activation):
    """``blocks`` reaches tf32x3's kernels (their -D CS_TX_BLOCKS module) on the plain forward, the
    fused-activation forward and the backward plan alike (no GPU: the plan's request is recorded)."""
    requested = []
    monkeypatch.setattr(
        igemm, "_plan_implicit_gemm", lambda spec, direction, big, **kw: requested.append(kw["tx_blocks"])
    )
    spec = SPECS[8]
    if activation is None:
        catalog.RECORDS["tf32x3"].build(spec, "forward", {"blocks": 4})
        catalog.RECORDS["tf32x3"].build(spec, "backward", {"blocks": 3})
        assert requested == [4, 3]
    else:
        catalog.plan_forward_activation(spec, "tf32x3", activation, {"blocks": 4})
        catalog.plan_forward_activation(spec, "tf32x3", activation)
        assert requested == [4, DEFINES["CS_TX_BLOCKS"]]


@pytest.mark.parametrize("stages", [None, 2, 5])
def test_tf32x3_stages_reach_the_kernel_module_and_its_shared_memory(monkeypatch, stages):
    """``stages`` selects the forward kernel's -D CS_TX_STAGES module and sizes the launch's dynamic shared
    memory from the same count (past 48 KiB the kernel's ceiling is raised first); 128-row tiles keep two
    stages (no GPU: the requests are recorded)."""
    kernels, launches, raised = [], [], []
    monkeypatch.setattr(rt, "kernel", lambda file, name, dtype, overrides=(): kernels.append((name, overrides)))
    monkeypatch.setattr(rt, "bind", lambda fn, grid, block, args, smem=0: launches.append(smem))
    monkeypatch.setattr(rt, "resident_blocks", lambda fn, threads, smem: raised.append(smem) or 1)
    monkeypatch.setattr(igemm, "_filter_offsets", lambda *a: None)
    monkeypatch.setattr(igemm, "_with_bias", lambda s, launch: launch)
    spec = _spec((2, 64, 20, 20), (64, 64, 3, 3), padding=1)
    given = {} if stages is None else {"stages": stages}
    catalog.RECORDS["tf32x3"].build(spec, "forward", {**given, "bm": 64})
    count = DEFINES["CS_TX_STAGES"] if stages is None else stages
    (name, overrides), smem = kernels[-1], launches[-1]
    assert name.startswith("conv2d_tf32x3_fwd@64,") and dict(overrides).get("CS_TX_STAGES", 4) == count
    assert smem == count * (2 * 64 * 12 + 8 * 136) * 4 == igemm.tf32x3_stage_bytes(64, overrides)
    assert raised == ([smem] if smem > 48 * 1024 else [])
    catalog.RECORDS["tf32x3"].build(spec, "forward", {"bm": 128})
    assert launches[-1] == 2 * (2 * 128 * 12 + 8 * 136) * 4
    # The fused activation and the backward's input gradient (a forward problem on tf32x3) take it too.
    catalog.plan_forward_activation(spec, "tf32x3", "relu", {**given, "bm": 64})
    assert dict(kernels[-1][1]).get("CS_TX_STAGES", 4) == count and launches[-1] == smem


def test_tf32x3_stages_reach_the_input_gradient(monkeypatch):
    """The backward plan hands its ``stages`` to the stride-1 input gradient it runs on tf32x3."""
    given = []

    class Recorder:
        def build(self, spec, direction, params=None):
            given.append((direction, dict(params or {})))

    monkeypatch.setattr(igemm, "TF32X3", Recorder())
    monkeypatch.setattr(rt, "cupy", lambda: None)
    monkeypatch.setattr(rt, "kernel", lambda *a, **kw: None)
    monkeypatch.setattr(rt, "bind", lambda *a, **kw: None)
    monkeypatch.setattr(rt, "grid_stride_blocks", lambda total: 1)
    spec = _spec((2, 64, 20, 20), (64, 64, 3, 3), padding=1)
    igemm._plan_input_gradient(spec.as_2d(), True, tensor_cores=True, tx_blocks=4, tx_stages=5)
    assert given == [("forward", {"mma": "sync", "blocks": 4, "stages": 5})]  # dX: mma.sync (wgmma: forward only)


@pytest.mark.parametrize("capability", [None, 80, 90])
def test_tf32x3_wgmma_is_hopper_forward_only_with_its_own_fixed_parameters(monkeypatch, capability):
    """``mma``: wgmma is the rule's choice forward on compute capability 9.0 only; it is refused on other
    GPUs, backward, and with any mma.sync parameter off its default (one kernel, no duplicates for the
    tuner); its plan asks for the wgmma kernel (after the weight split, as mma.sync's), with the
    fused activation too, 128-thread blocks over 128 pixels x 64 channels (no GPU: requests recorded)."""
    monkeypatch.setattr(rt, "compute_capability", lambda: capability)
    record = catalog.RECORDS["tf32x3"]
    spec = _spec((2, 20, 9, 11), (100, 20, 3, 3), padding=1)
    defaults = record.defaults(spec, "forward")
    hopper = capability == 90
    assert defaults["mma"] == ("wgmma" if hopper else "sync")
    # The wgmma kernel gathers chunk by chunk: its default gather, even where 20 channels leave a partial chunk.
    assert defaults["gather"] == ("chunked" if hopper else "table")
    assert record.defaults(spec, "backward")["mma"] == "sync"
    wgmma = {**defaults, "mma": "wgmma", "gather": "chunked"}
    verdict = record.can_run(spec, "forward", wgmma)
    assert verdict is True if capability in (None, 90) else "needs Hopper" in verdict
    assert "forward product only" in record.can_run(spec, "backward", {"mma": "wgmma"})
    if verdict is not True:
        return
    for name, value in (("bm", 128), ("stages", 5), ("gather", "table"), ("blocks", 0)):
        assert f"{name}=" in record.can_run(spec, "forward", {**wgmma, name: value}), name
        # Pinned without mma, a value only mma.sync has selects mma.sync: parameter sets of the
        # mma.sync kernel keep running on Hopper.
        if hopper:
            assert record.resolve(spec, "forward", {name: value})["mma"] == "sync", name
            assert record.can_run(spec, "forward", {name: value}) is True, name
    requested, launches = [], []
    monkeypatch.setattr(rt, "kernel", lambda file, name, dtype, **kw: requested.append((file, name)))
    monkeypatch.setattr(rt, "bind", lambda fn, grid, block, args, smem=0: launches.append((grid, block, smem)))
    monkeypatch.setattr(igemm, "_filter_offsets", lambda *a: None)
    monkeypatch.setattr(igemm, "_with_bias", lambda s, launch: launch)
    record.build(spec, "forward", wgmma)
    split, conv = ("implicit_gemm_tf32x3.cu", "tf32x3_split_weights@1"), ("tf32x3_wgmma.cu", "conv2d_tf32x3_wgmma@0")
    assert requested == [split, conv]
    assert launches == [((math.ceil(2 * 9 * 11 / 128), 2, 1), (128,), igemm.TF32X3_WGMMA_SMEM)]
    assert igemm.TF32X3_WGMMA_SMEM == 5 * (2 * 64 * 8 + 8 * 136) * 4 <= 48 * 1024
    catalog.plan_forward_activation(spec, "tf32x3", "relu6", wgmma)
    assert requested[-1] == ("tf32x3_wgmma.cu", "conv2d_tf32x3_wgmma@2")
    record.build(spec, "forward", {**wgmma, "mma": "sync"})
    assert requested[-1][1].startswith("conv2d_tf32x3_fwd@")


def test_tf32x3_refuses_a_stage_count_at_128_rows():
    """128-row tiles keep two stages: another count would only compile a duplicate module."""
    spec = _spec((2, 64, 20, 20), (256, 64, 3, 3), padding=1)
    record = catalog.RECORDS["tf32x3"]
    assert record.can_run(spec, "forward", {"bm": 128, "stages": DEFINES["CS_TX_STAGES"]}) is True
    verdict = record.can_run(spec, "forward", {"bm": 128, "stages": 5})
    assert "stages=5: 128-row tiles keep two stages" in verdict
    assert record.can_run(spec, "forward", {"bm": 64, "stages": 5}) is True


def test_register_tiled_takes_fewer_outputs_per_thread_on_a_grid_too_small_for_the_gpu(monkeypatch):
    """The hand rule halves px while its grid would leave more than half the multiprocessors idle,
    keeps px where the grid fills them or no GPU answers, and the defaults follow it."""
    from convsuite.backends import _cupy_runtime as runtime

    small = _spec((64, 32, 32, 32), (16, 32, 3, 3), padding=1)  # 64 blocks at px=4
    large = _spec((1000, 16, 34, 34), (4, 16, 7, 7), padding=6)  # 2,000 blocks at px=4
    record = catalog.RECORDS["register_tiled"]

    def blocks(spec, params):
        s = spec.as_2d()
        return math.prod(
            conv2d._register_tiled_grid(s, params["mt"], conv2d._tile_geometry(s, "register_tiled", params)["tiles"])
        )

    monkeypatch.setattr(runtime, "sm_count_or_none", lambda: None)
    assert conv2d._tiled_params(small.as_2d(), "register_tiled")["px"] == conv2d.REGISTER_PX
    for sms, want in ((132, 2), (1000, 1), (100, conv2d.REGISTER_PX)):
        monkeypatch.setattr(runtime, "sm_count_or_none", lambda sms=sms: sms)
        params = conv2d._tiled_params(small.as_2d(), "register_tiled")
        assert params["px"] == want, sms
        assert params["block_w"] == conv2d._block_width(small.as_2d(), want)
        assert record.resolve(small, "forward", None) == params
        assert record.can_run(small, "forward", params) is True
        # Halved only while the grid would fill fewer than half the multiprocessors.
        assert want == 1 or 2 * blocks(small, params) >= sms
        if want < conv2d.REGISTER_PX:
            wider = {**params, "px": 2 * want, "block_w": conv2d._block_width(small.as_2d(), 2 * want)}
            assert 2 * blocks(small, wider) < sms
        assert conv2d._tiled_params(large.as_2d(), "register_tiled")["px"] == conv2d.REGISTER_PX
        # auto's rule weighs the grid at REGISTER_PX (its threshold's measurements): unmoved by the launch's px.
        assert conv2d.register_tiled_blocks(small) == 64


def test_the_gather_rules_follow_the_measured_channel_counts():
    """tf32x3 chunks only whole chunks of 8 channels, igemm_big from 8 channels on; forward the layer's
    input channels per group, backward its output channels (the stride-1 dX's input)."""
    tf32x3, big = catalog.RECORDS["tf32x3"], catalog.RECORDS["igemm_big"]
    fat = _spec((2, 64, 20, 20), (200, 64, 3, 3), padding=1)
    fa19 = _spec((2, 12, 22, 22), (24, 12, 5, 5))
    assert [r.defaults(fat, "forward")["gather"] for r in (tf32x3, big)] == ["chunked", "chunked"]
    assert [r.defaults(fa19, "forward")["gather"] for r in (tf32x3, big)] == ["table", "chunked"]
    assert big.defaults(fa19, "backward")["gather"] == "chunked"  # 24 output channels
    narrow = _spec((2, 6, 20, 20), (6, 6, 3, 3), padding=1)
    assert [r.defaults(narrow, d)["gather"] for r in (tf32x3, big) for d in ("forward", "backward")] == ["table"] * 4
    grouped = _spec((2, 48, 9, 9), (36, 16, 3, 3), groups=3)  # 16 in, 12 out per group
    assert tf32x3.defaults(grouped, "forward")["gather"] == "chunked"
    assert tf32x3.defaults(grouped, "backward")["gather"] == "table"
    for record in (tf32x3, big):
        (gather,) = [t for t in record.tunables if t.name == "gather"]
        assert gather.values == tuple(igemm.GATHERS) == tuple(sorted(igemm.GATHERS))


def test_the_tf32x3_register_budget_follows_the_reduction_length():
    """tf32x3 runs three blocks per multiprocessor from 768 products per output, four below; backward
    the budget is the stride-1 dX's, a reduction over the layer's output channels."""
    tf32x3 = catalog.RECORDS["tf32x3"]
    c64 = _spec((2, 64, 20, 20), (64, 64, 3, 3), padding=1)  # 576 products
    c96 = _spec((2, 96, 20, 20), (96, 96, 3, 3), padding=1)  # 864
    wide_in = _spec((2, 128, 9, 9), (32, 128, 3, 3), padding=1)  # 1152 forward, 288 backward
    pointwise = _spec((2, 1024, 7, 7), (256, 1024, 1, 1))  # 1024 forward, 256 backward
    assert [tf32x3.defaults(s, "forward")["blocks"] for s in (c64, c96, wide_in, pointwise)] == [4, 3, 3, 3]
    assert [tf32x3.defaults(s, "backward")["blocks"] for s in (c64, c96, wide_in, pointwise)] == [4, 3, 4, 4]
    edge = _spec((2, 256, 9, 9), (8, 256, 1, 1))  # 256 products: below; 768 exactly: three blocks
    assert tf32x3.defaults(edge, "forward")["blocks"] == 4
    assert tf32x3.defaults(_spec((2, 768, 5, 5), (8, 768, 1, 1)), "forward")["blocks"] == 3
    (blocks,) = [t for t in tf32x3.tunables if t.name == "blocks"]
    assert {3, 4} <= set(blocks.values)


@pytest.mark.parametrize("algorithm", ["igemm_big", "tf32x3"])
def test_the_gather_reaches_the_kernel_names_it_selects(monkeypatch, algorithm):
    """Every forward kernel of the big implicit GEMMs is compiled with both gathers, and a plan asks for the
    instantiation of its gather (plain, fused activation, masked dX; no GPU: the request is recorded)."""
    for filename, prefix in (
        ("implicit_gemm_big.cu", "conv2d_igemm_fwd@"),
        ("implicit_gemm_tf32x3.cu", "conv2d_tf32x3_fwd@"),
        ("implicit_gemm_big_masked.cu", "conv2d_igemm_fwd_masked@"),
    ):
        names = [k for k in KERNELS[filename] if k.startswith(prefix)]
        assert {n.rsplit(",", 1)[1] for n in names} == {str(v) for v in igemm.GATHERS.values()}, filename
    requested = []
    monkeypatch.setattr(rt, "kernel", lambda filename, name, dtype, **kw: requested.append(name))
    monkeypatch.setattr(igemm, "_filter_offsets", lambda *a: None)
    monkeypatch.setattr(rt, "bind", lambda *a, **kw: None)
    monkeypatch.setattr(igemm, "_with_bias", lambda s, launch: launch)
    spec = _spec((2, 64, 20, 20), (200, 64, 3, 3), padding=1)
    for gather, code in igemm.GATHERS.items():
        catalog.RECORDS[algorithm].build(spec, "forward", {"gather": gather})
        assert requested.pop().endswith(f",{code}"), gather
        catalog.plan_forward_activation(spec, algorithm, "relu", {"gather": gather})
        assert requested.pop().endswith(f",1,{code}"), gather
    if algorithm == "igemm_big":
        for gather, code in igemm.GATHERS.items():
            igemm._plan_forward_masked(spec, "igemm_big", gather)
            assert requested.pop() == f"conv2d_igemm_fwd_masked@128,{code}"


@pytest.mark.parametrize(
    "algorithm, w_shape, dgrad_kernel",
    [
        # 3x3, 12 output channels: the dX (12 channels in, 40 out) runs on tf32x3 with tf32x3's rule.
        ("tf32x3", (12, 40, 3, 3), "conv2d_tf32x3_fwd@64,0,0"),
        # 1x1: a 12-product dX is too short for tf32x3; igemm_big runs it with its own rule (chunked).
        ("tf32x3", (12, 40, 1, 1), "conv2d_igemm_fwd@64,0,1"),
        ("igemm_big", (12, 40, 1, 1), "conv2d_igemm_fwd@64,0,1"),
    ],
)
def test_the_backward_gather_reaches_the_input_gradient_kernel_that_runs_it(
    monkeypatch, algorithm, w_shape, dgrad_kernel
):
    """The stride-1 dX runs through a forward kernel: the layer algorithm's own with the backward
    plan's gather, a fallback kernel with its own rule (no GPU: the requested kernels are recorded)."""
    requested = []
    monkeypatch.setattr(rt, "kernel", lambda filename, name, dtype, **kw: requested.append(name))
    monkeypatch.setattr(rt, "cupy", lambda: None)
    monkeypatch.setattr(rt, "sm_count", lambda: 132)
    monkeypatch.setattr(igemm, "_filter_offsets", lambda *a: None)
    monkeypatch.setattr(rt, "bind", lambda *a, **kw: None)
    monkeypatch.setattr(igemm, "_with_bias", lambda s, launch: launch)
    spec = _spec((2, 40, 9, 9), w_shape, padding=w_shape[-1] // 2)
    catalog.RECORDS[algorithm].build(spec, "backward")
    assert dgrad_kernel in requested, requested
