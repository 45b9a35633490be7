"""Tunable parameters of the CPU backends' algorithms (numba, cython, numpy, joblib).

Every configuration of every tunable CPU algorithm (or, where the product is
large, its extremes plus a deterministic sample covering every value) is held
to the float64 reference on cases with odd sizes, stride 2, dilation 2,
groups and padding, in float32 and float64, forward and backward where the
algorithm has a backward. Outputs start as NaN, so an element a tile
configuration forgets to write fails. The constraints refuse impossible sets
with a reason, unknown names and values raise, and the defaults are the
hand-chosen values the kernels used before they were tunable.
"""

from __future__ import annotations

import importlib
import itertools
import random

import numpy as np
import pytest

import convsuite as cs
from convsuite._registry import get_backend
from convsuite._validation import prepare_forward
from convsuite.testing import (
    assert_within,
    backward_tolerances,
    forward_tolerance,
    reference_backward,
    reference_forward,
)

INFO = {b.name: b for b in cs.list_backends()}

#: (x shape, w shape, stride, padding, dilation, groups): small, odd, each
#: crossing tile boundaries of the smaller tile widths and row tiles.
CASES_2D = [
    ((2, 4, 9, 11), (6, 2, 3, 3), 1, 1, 1, 2),
    ((1, 3, 13, 10), (5, 3, 3, 2), 2, ((2, 1), (0, 1)), (1, 2), 1),
    ((2, 6, 8, 7), (6, 1, 3, 3), (1, 2), 2, 2, 6),  # depthwise
    ((1, 2, 3, 301), (8, 2, 2, 5), 1, (0, 2), 1, 1),  # a long row: several column tiles
    ((1, 2, 5, 70), (4, 2, 1, 3), (2, 3), (1, 4), (1, 2), 1),  # stride 3 with padding on both sides
    ((2, 3, 17, 120), (4, 3, 3, 3), 1, 1, 1, 1),  # 12.7 KiB per im2col row in float32: 1 to 17 rows per tile
]
CASES_1D = [
    ((2, 1, 701), (1, 1, 3), 1, 1, 1, 1),  # a signal; taps in registers
    ((1, 2, 1101), (2, 1, 7), 2, 3, 2, 2),  # depthwise 1-D, long kernel: accumulator path
    ((3, 2, 600), (4, 1, 4), 1, "same", 1, 2),
]

#: Products larger than this are sampled (extremes plus every value at least once).
MAX_CONFIGS = 24


def _spec(case, dtype):
    """The validated spec and contiguous random operands of one case."""
    x_shape, w_shape, stride, padding, dilation, groups = case
    rng = np.random.default_rng(abs(hash((x_shape, w_shape))) % 2**32)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    bias = rng.standard_normal(w_shape[0]).astype(dtype)
    ndim = len(x_shape) - 2
    call = prepare_forward(f"conv{ndim}d", ndim, x, w, bias, stride, padding, dilation, groups)
    return call.spec, call.x, call.w, call.bias


def _configurations(record) -> list[dict]:
    """Every configuration, or the defaults, the extremes and a seeded sample covering every value of every tunable."""
    every = record.configurations()
    if len(every) <= MAX_CONFIGS:
        return every
    tunables = record.tunables
    # The CPU defaults do not depend on the case (checked below), so any spec gives them.
    defaults = record.defaults(_spec(CASES_2D[0], np.float64)[0], "forward")
    chosen = [defaults, {t.name: t.values[0] for t in tunables}, {t.name: t.values[-1] for t in tunables}]
    # A Latin-style pass: the i-th configuration takes each tunable's i-th value (cycled),
    # with the axes shuffled by a fixed seed, so every value of every tunable appears.
    rng = random.Random(16)
    longest = max(len(t.values) for t in tunables)
    orders = {t.name: rng.sample(range(longest), longest) for t in tunables}
    for i in range(longest):
        chosen.append({t.name: t.values[orders[t.name][i] % len(t.values)] for t in tunables})
    chosen += rng.sample(every, MAX_CONFIGS - len(chosen))
    unique = []
    for c in chosen:
        if c not in unique:
            unique.append(c)
    return unique


def _tunable_algorithms(with_directions: bool = False):
    """(backend, algorithm[, direction]) of every CPU algorithm with tunables; skipped where unavailable."""
    out = []
    for backend in ("numba", "cython", "numpy", "joblib"):
        info = INFO[backend]
        marks = () if info.available else pytest.mark.skip(reason=f"{backend} unavailable: {info.reason}")
        # The records are built without importing the kernels, so this works when a backend is unavailable.
        for name, record in get_backend(backend).algorithm_table().items():
            for direction in record.directions if with_directions else ("",):
                args = (backend, name, direction) if with_directions else (backend, name)
                out.append(pytest.param(*args, marks=marks, id="-".join(filter(None, args))))
    return out


def _run(backend, algorithm, direction, spec, x, w, bias, params, grad_y=None):
    """Plan with ``params`` and run on NaN-poisoned outputs; returns the outputs."""
    launch = get_backend(backend).plan(spec, algorithm, direction, params)
    if direction == "forward":
        out = np.full(spec.y_shape, np.nan, dtype=spec.dtype)
        launch(x, w, bias, out)
        return (out,)
    gx = np.full(spec.x_shape, np.nan, dtype=spec.dtype)
    gw = np.full(spec.w_shape, np.nan, dtype=spec.dtype)
    gb = np.full(spec.out_channels, np.nan, dtype=spec.dtype)
    launch(grad_y, x, w, gx, gw, gb)
    return gx, gw, gb


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("backend", "algorithm", "direction"), _tunable_algorithms(with_directions=True))
def test_every_configuration_agrees_with_the_reference(backend, algorithm, direction, dtype):
    record = get_backend(backend).algorithm_table()[algorithm]
    assert record.tunables, f"{backend}/{algorithm} declares no tunables"
    configs = _configurations(record)
    names = ("y",) if direction == "forward" else ("grad_x", "grad_w", "grad_b")
    ran = set()
    for case in CASES_2D + CASES_1D:
        spec, x, w, bias = _spec(case, dtype)
        if record.can_run(spec, direction) is not True:
            continue  # the algorithm declines the case whatever its parameters (e.g. line1d on 2-D)
        if direction == "forward":
            expected = (reference_forward(spec, x, w, bias),)
            tolerance = (forward_tolerance(spec, x, w, bias),)
        else:
            grad_y = np.random.default_rng(7).standard_normal(spec.y_shape).astype(dtype)
            expected = reference_backward(spec, grad_y, x, w)
            tolerance = backward_tolerances(spec, grad_y, x, w)
        for i, params in enumerate(configs):
            if record.check_params(spec, direction, params) is not True:
                continue  # refused (a parameter the direction does not use); tested below
            gy = None if direction == "forward" else grad_y
            got = _run(backend, algorithm, direction, spec, x, w, bias, params, gy)
            for name, g, e, t in zip(names, got, expected, tolerance):
                assert_within(g, e, t, f"{backend}/{algorithm} {direction} {params} on {case}: {name}")
            ran.add(i)
    # Every configuration the direction accepts ran on some case.
    accepted = {i for i, p in enumerate(configs) if record.check_params(spec, direction, p) is True}
    assert ran and ran == accepted


def _spec_of_shapes(x_shape, w_shape, dtype=np.float32, **kw):
    """A spec for shapes too large to allocate, from zero-stride views."""
    x = np.broadcast_to(np.zeros((), dtype), x_shape)
    w = np.broadcast_to(np.zeros((), dtype), w_shape)
    ndim = len(x_shape) - 2
    return prepare_forward(
        f"conv{ndim}d",
        ndim,
        x,
        w,
        None,
        kw.get("stride", 1),
        kw.get("padding", 0),
        kw.get("dilation", 1),
        kw.get("groups", 1),
        convert=False,
    ).spec


@pytest.mark.parametrize("backend", ["numba", "cython"])
def test_tile_budget_reaches_the_kernel_as_rows(backend):
    """``tile_kib`` sets the rows per im2col tile the kernel receives: one row at the least budget."""
    module = {"numba": "numba_backend", "cython": "cython_backend"}[backend]
    extra = importlib.import_module(f"convsuite.backends.{module}")._gemm_extra
    spec = _spec_of_shapes((4, 3, 17, 120), (4, 3, 3, 3), padding=1)  # a row's tile: 27 * 120 * 4 B = 12.7 KiB
    rows = [extra(spec.as_2d(), "backward", {"tile_kib": k, "max_partials": 32})[0] for k in (16, 32, 64, 128, 256)]
    assert rows == [1, 2, 5, 10, 17]


def test_constraints_refuse_parameters_a_direction_does_not_use():
    spec = _spec_of_shapes((2, 4, 10, 10), (8, 4, 3, 3))
    numba_b, cython_b = get_backend("numba"), get_backend("cython")
    verdict = numba_b.can_run(spec, "direct", "backward", {"tile_w": 32})
    assert isinstance(verdict, str) and "'tile_w'" in verdict and "backward" in verdict
    verdict = numba_b.can_run(spec, "direct", "backward", {"chunks_per_thread": 1})
    assert isinstance(verdict, str) and "'chunks_per_thread'" in verdict
    verdict = numba_b.can_run(spec, "gemm", "forward", {"max_partials": 1, "tile_kib": 16})
    assert isinstance(verdict, str) and "'max_partials'" in verdict and "forward" in verdict
    assert numba_b.can_run(spec, "gemm", "backward", {"max_partials": 1}) is True
    verdict = cython_b.can_run(spec, "direct", "backward", {"tile_w": 1024})
    assert isinstance(verdict, str) and "'tile_w'" in verdict
    # The defaults are always accepted.
    for b in (numba_b, cython_b):
        for name in ("direct", "gemm"):
            for direction in ("forward", "backward"):
                assert b.can_run(spec, name, direction) is True


def test_numpy_tile_budget_default_and_the_tap_path():
    from convsuite.backends import numpy_backend

    b = get_backend("numpy")
    record = b.algorithm_table()["im2col"]
    spec = _spec_of_shapes((2, 4, 10, 10), (8, 4, 3, 3))
    assert record.defaults(spec, "forward") == {"tile_kib": numpy_backend.WORKSPACE_BYTES // 1024} == {"tile_kib": 2048}
    assert b.can_run(spec, "im2col", "backward", {"tile_kib": 1024}) is True
    # Padding far larger than the input: computed tap by tap, which has no tile to size.
    taps = _spec_of_shapes((1, 1, 6, 6), (1, 1, 3, 3), dtype=np.float64, padding="same", dilation=10**4)
    assert numpy_backend._padding_too_large(taps.as_2d())
    assert b.can_run(taps, "im2col", "forward") is True
    verdict = b.can_run(taps, "im2col", "forward", {"tile_kib": 1024})
    assert isinstance(verdict, str) and "tap by tap" in verdict and "'tile_kib'" in verdict and "got 1024" in verdict


def test_joblib_pieces_default_and_cut():
    from convsuite.backends import joblib_backend

    b = get_backend("joblib")
    spec = _spec_of_shapes((6, 4, 10, 10), (8, 4, 3, 3))
    # Each algorithm is the Cython one per piece: its kernel's parameters, then the pieces.
    assert b.algorithm_table()["direct"].defaults(spec, "forward") == {"tile_w": 256, "pieces_per_worker": 2}
    assert b.algorithm_table()["gemm"].defaults(spec, "forward") == {"tile_kib": 256, "pieces_per_worker": 2}
    assert joblib_backend.PIECES_PER_WORKER == 2
    # The Cython kernel's own constraint holds: its backward takes only the default tile_w.
    verdict = b.can_run(spec, "direct", "backward", {"tile_w": 64})
    assert isinstance(verdict, str) and "'tile_w'" in verdict and "got 64" in verdict
    # The parameter is how many batch slices (or row slabs) each worker gets.
    assert b._batch_bounds(spec, 2, 1) == [0, 3, 6]
    assert b._batch_bounds(spec, 2, 2) == [0, 1, 3, 4, 6]
    axis, cuts = b._row_pieces(spec.as_2d(), 1, 4)
    assert axis == 0 and len(cuts) == 4


@pytest.mark.parametrize("backend", ["numba", "cython"])
def test_unknown_parameter_or_value_is_a_clear_error(backend):
    spec = _spec_of_shapes((2, 4, 10, 10), (8, 4, 3, 3))
    b = get_backend(backend)
    with pytest.raises(
        ValueError, match=r"`params`: 'direct' has no tunable parameter 'bogus' \(its parameters: tile_w"
    ):
        b.plan(spec, "direct", "forward", {"bogus": 1})
    with pytest.raises(ValueError, match=r"'tile_w' accepts 32, 64, .*; got 100"):
        b.plan(spec, "direct", "forward", {"tile_w": 100})
    with pytest.raises(ValueError, match=r"'tile_kib' accepts 16, 32, .*; got 3"):
        b.plan(spec, "gemm", "forward", {"tile_kib": 3})
    with pytest.raises(ValueError, match=r"got 64\.0"):  # a float is not an int value
        b.plan(spec, "gemm", "forward", {"tile_kib": 64.0})


@pytest.mark.skipif(not INFO["numba"].available, reason=f"numba unavailable: {INFO['numba'].reason}")
def test_numba_defaults_are_the_hand_chosen_values():
    from convsuite._threads import get_num_threads
    from convsuite.backends import _numba_blocked, _numba_kernels, _numba_line, _tiles, numba_backend

    table = get_backend("numba").algorithm_table()
    spec = _spec_of_shapes((3, 16, 40, 30), (32, 16, 3, 3), padding=1)
    s = spec.as_2d()
    threads = get_num_threads()
    assert table["direct"].defaults(spec, "forward") == {"tile_w": _numba_kernels.TILE_W, "chunks_per_thread": 16}
    assert table["blocked"].defaults(spec, "forward") == {"tile_w": _numba_blocked.TILE_W, "chunks_per_thread": 16}
    spec1 = _spec_of_shapes((1, 1, 5000), (1, 1, 9))
    assert table["line1d"].defaults(spec1, "forward") == {"tile": _numba_line.TILE, "chunks_per_thread": 16}
    assert numba_backend.CHUNKS_PER_THREAD == 16 and numba_backend.MAX_PARTIALS == 32
    # The extra arguments the kernels receive are those of before the parameters existed.
    assert numba_backend._direct_extra(s, "forward", table["direct"].defaults(spec, "forward")) == (256, 16 * threads)
    Ho, Wo = s.out_size
    assert _tiles.WORKSPACE_BYTES == 256 * 2**10
    assert table["gemm"].defaults(spec, "forward") == {"tile_kib": 256, "max_partials": 32}
    # The rows the kernels receive are those of the rule before the parameters existed, for
    # tiles of Wo + 2 columns a row (stride 1: wide tiles, see _numba_gemm.forward).
    Wp = Wo + 2
    min_tiles = -(-2 * threads // (s.batch * s.groups))
    per_column = s.reduction_length + s.out_channels_per_group  # forward: the tile's results share the budget
    rows_fwd = max(1, min(_tiles.WORKSPACE_BYTES // (per_column * Wp * s.itemsize), -(-Ho // min_tiles), Ho))
    rows_bwd = max(1, min(_tiles.WORKSPACE_BYTES // (s.reduction_length * Wp * s.itemsize), Ho))
    assert numba_backend._gemm_extra(s, "forward", table["gemm"].defaults(spec, "forward")) == (rows_fwd, 32, 1)
    # A 1x1 layer with more output channels than pixels: whole images, split by output channels.
    late = _spec_of_shapes((1, 160, 7, 7), (960, 160, 1, 1)).as_2d()
    mrows = max(8, -(-960 // -(-2 * threads // 1)))
    assert numba_backend._gemm_extra(late, "forward", table["gemm"].defaults(late, "forward")) == (7, mrows, 0)
    partials = max(1, min(32, numba_backend.PARTIALS_BYTES // (s.out_channels * s.reduction_length * s.itemsize)))
    assert numba_backend._gemm_extra(s, "backward", table["gemm"].defaults(spec, "backward")) == (rows_bwd, partials, 1)
    # Stride 2: compact tiles, Wo columns a row.
    strided = _spec_of_shapes((3, 16, 40, 30), (32, 16, 3, 3), stride=2, padding=1).as_2d()
    assert numba_backend._gemm_extra(strided, "backward", table["gemm"].defaults(strided, "backward"))[2] == 0


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "padding"),
    [
        ((8, 256, 14, 14), (256, 256, 3, 3), 1),  # 14 columns a row: one row per 256 KiB tile
        ((8, 64, 56, 56), (64, 64, 3, 3), 1),  # 56 columns, reduction 576
        ((1, 512, 7, 7), (512, 512, 3, 3), 1),  # every row fits less than 256 columns
        ((2, 512, 64, 64), (512, 512, 3, 3), 1),  # reduction 4608: capped at 4 MiB
    ],
)
def test_default_gemm_tiles_hold_enough_columns(x_shape, w_shape, padding):
    """The default budget grows (up to 4 MiB) until a tile holds MIN_GEMM_COLUMNS columns or every row,
    and takes the smallest budget that does."""
    from convsuite.backends import _tiles, cython_backend, numba_backend

    spec = _spec_of_shapes(x_shape, w_shape, padding=padding)
    s = spec.as_2d()
    Ho, Wo = s.out_size
    base, top = _tiles.WORKSPACE_BYTES // 1024, _tiles.MAX_DEFAULT_TILE_KIB
    checked = 0
    for backend, extra in (("cython", cython_backend._gemm_extra), ("numba", numba_backend._gemm_extra)):
        if not INFO[backend].available:
            continue
        for direction in ("forward", "backward"):
            params = get_backend(backend).algorithm_table()["gemm"].defaults(spec, direction)
            kib = params["tile_kib"]
            assert kib == base or (kib in _tiles.TILE_KIB_VALUES and base < kib <= top)
            rows = extra(s, direction, params)[0]
            if backend == "numba":
                per_column, width = numba_backend._gemm_tile_shape(s, direction)
            else:
                per_column, width = s.reduction_length, Wo
            limit = Ho  # numba's forward also keeps >= 2 tiles per thread
            if backend == "numba" and direction == "forward":
                limit = -(-Ho // -(-2 * cs.get_num_threads() // (s.batch * s.groups)))
            assert rows * width >= _tiles.MIN_GEMM_COLUMNS or rows >= limit or kib == top, (backend, direction)
            if kib > base:  # the next smaller budget would hold too few rows
                smaller = max(v for v in (base, *_tiles.TILE_KIB_VALUES) if v < kib)
                need = min(Ho, -(-_tiles.MIN_GEMM_COLUMNS // width))
                assert max(1, smaller * 1024 // (per_column * width * s.itemsize)) < need
            checked += 1
    assert checked or not (INFO["cython"].available or INFO["numba"].available)


@pytest.mark.skipif(not INFO["cython"].available, reason=f"cython unavailable: {INFO['cython'].reason}")
def test_cython_defaults_are_the_hand_chosen_values():
    from convsuite.backends import _tiles, cython_backend

    table = get_backend("cython").algorithm_table()
    spec = _spec_of_shapes((3, 16, 40, 30), (32, 16, 3, 3), padding=1)
    s = spec.as_2d()
    assert table["direct"].defaults(spec, "forward") == {"tile_w": 256}
    assert cython_backend._direct_extra(s, "forward", {"tile_w": 256}) == (256,)
    assert cython_backend._direct_extra(s, "backward", {"tile_w": 256}) == ()
    for direction in ("forward", "backward"):
        assert table["gemm"].defaults(spec, direction) == {"tile_kib": _tiles.WORKSPACE_BYTES // 1024}
        rows = max(1, min(_tiles.WORKSPACE_BYTES // (s.reduction_length * s.out_size[1] * s.itemsize), s.out_size[0]))
        assert cython_backend._gemm_extra(s, direction, table["gemm"].defaults(spec, direction)) == (rows,)


@pytest.mark.parametrize(("backend", "algorithm"), _tunable_algorithms())
def test_default_plan_equals_the_plan_with_explicit_defaults(backend, algorithm):
    """No params and the defaults spelled out give the same bits: nothing changes for users who never tune."""
    case = {"line1d": CASES_1D[1], "depthwise": CASES_2D[2]}.get(algorithm, CASES_2D[1])
    spec, x, w, bias = _spec(case, np.float32)
    b = get_backend(backend)
    record = b.algorithm_table()[algorithm]
    implicit = _run(backend, algorithm, "forward", spec, x, w, bias, None)
    explicit = _run(backend, algorithm, "forward", spec, x, w, bias, record.defaults(spec, "forward"))
    np.testing.assert_array_equal(implicit[0], explicit[0])


@pytest.mark.skipif(not INFO["numba"].available, reason=f"numba unavailable: {INFO['numba'].reason}")
@pytest.mark.parametrize("max_partials", [1, 4, 64])
def test_numba_gemm_backward_is_deterministic_per_configuration(max_partials):
    """The dW partials are fixed by the problem and the parameter, never by the thread count: same bits."""
    spec, x, w, _ = _spec(((9, 4, 11, 10), (6, 2, 3, 3), 1, 1, 1, 2), np.float32)
    grad_y = np.random.default_rng(3).standard_normal(spec.y_shape).astype(np.float32)
    params = {"max_partials": max_partials, "tile_kib": 16}
    runs = []
    try:
        for n in (1, cs.get_num_threads() if cs.get_num_threads() > 1 else 2):
            cs.set_num_threads(n)
            runs.append(_run("numba", "gemm", "backward", spec, x, w, None, params, grad_y))
    finally:
        cs.set_num_threads(None)
    for a, b in itertools.zip_longest(*runs):
        np.testing.assert_array_equal(a, b)
