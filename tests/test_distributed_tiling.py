"""Geometry of the pieces the scale-out paths cut (no Dask needed)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import convsuite as cs
from convsuite._spec import output_length
from convsuite._tiling import even_bounds, output_bounds_for_input_chunks, pieces
from convsuite.distributed import is_dask_array


@given(
    n=st.integers(1, 60),
    kernel=st.integers(1, 7),
    stride=st.integers(1, 5),
    dilation=st.integers(1, 3),
    pads=st.tuples(st.integers(0, 12), st.integers(0, 12)),
    chunk=st.integers(1, 20),
)
def test_pieces_tile_the_output_and_reproduce_it_locally(n, kernel, stride, dilation, pads, chunk):
    n_out = output_length(n, pads, kernel, stride, dilation)
    if n_out < 1:
        return  # no output at all: the front end refuses this case before any cutting
    chunks = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
    bounds = output_bounds_for_input_chunks(chunks, n_out, pads[0], stride)
    assert bounds[0] == 0 and bounds[-1] == n_out and all(a < b for a, b in zip(bounds, bounds[1:]))
    rng = np.random.default_rng(n)
    x, w = rng.standard_normal(n), rng.standard_normal(kernel)
    whole = cs.conv1d(x, w, stride=stride, dilation=dilation, padding=(pads,), backend="numpy")
    for p in pieces(bounds, n, pads[0], kernel, stride, dilation):
        if p.in_size == 0:  # reads only padding
            np.testing.assert_array_equal(whole[p.out_lo : p.out_hi], 0)
            continue
        local = cs.conv1d(
            x[p.in_lo : p.in_hi],
            w,
            stride=stride,
            dilation=dilation,
            padding=((p.pad_before, p.pad_after),),
            backend="numpy",
        )
        assert local.shape == (p.out_size,)
        np.testing.assert_allclose(local, whole[p.out_lo : p.out_hi], rtol=1e-12, atol=1e-12)


def test_even_bounds_cover_the_range_with_near_equal_parts():
    assert even_bounds(10, 3) == [0, 3, 6, 10]
    assert even_bounds(2, 5) == [0, 1, 2]


def test_dask_arrays_are_recognised_without_importing_dask():
    code = (
        "import sys, numpy as np, convsuite as cs\n"
        "from convsuite.distributed import is_dask_array\n"
        "assert not is_dask_array(np.ones(3))\n"
        "cs.conv1d(np.ones(8), np.ones(3))\n"
        "assert 'dask' not in sys.modules, 'dask was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert not is_dask_array([1, 2])


def test_captured_shards_refuse_bad_arguments_before_touching_a_gpu():
    """CapturedShards checks its shards and keywords first, with errors that name them (no CuPy needed)."""
    import pytest

    from convsuite.distributed.multigpu import CapturedShards, Shard

    w = np.zeros((2, 1, 3, 3), np.float32)
    host = Shard(0, 0, 2, np.zeros((2, 1, 8, 8), np.float32))
    with pytest.raises(TypeError, match="`shards` must be a non-empty list of multigpu.Shard"):
        CapturedShards([], w)
    with pytest.raises(TypeError, match="`shards` must be a non-empty list of multigpu.Shard"):
        CapturedShards([np.zeros((2, 1, 8, 8))], w)
    with pytest.raises(TypeError, match=r"`shards\[0\].array` must be a CuPy array; got ndarray"):
        CapturedShards([host], w)
    with pytest.raises(ValueError, match=r"`w` holds per-GPU copies .* for devices \[1\], but shards live on \[0\]"):
        CapturedShards([host], {1: w})
    with pytest.raises(ValueError, match=r"`bias` holds per-GPU copies .* for devices \[\]"):
        CapturedShards([host], w, {})
    with pytest.raises(TypeError, match="`out` is not taken"):
        CapturedShards([host], w, out=host.array)
    with pytest.raises(ValueError, match="forward pass only; got direction='backward'"):
        CapturedShards([host], w, direction="backward")


def test_a_replicated_operand_without_a_copy_on_a_device_is_refused_by_name():
    import pytest

    from convsuite.distributed.multigpu import _replicate

    w = np.zeros((2, 1, 3, 3), np.float32)
    assert _replicate({0: w, 1: w}, 1) is w
    with pytest.raises(ValueError, match=r"copies on devices \[0\], not on device 1"):
        _replicate({0: w}, 1)
