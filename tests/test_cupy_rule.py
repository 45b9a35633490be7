"""The cupy backend's hand rule (``algorithm="auto"``) without a GPU: one layer class at a time.

The rule reads only the spec (``convsuite/backends/_cupy_rule.py``, where each
threshold cites the measurements it comes from), so it is evaluated here with
the spec of a NumPy call. Each class is checked on shapes from those
measurements and on others of the same class, and each threshold on both sides.
"""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite._capture import graph_capture
from convsuite.backends import _cupy_rule as rule
from convsuite.backends.cupy._catalog import RECORDS
from convsuite.backends.cupy.algorithms.conv2d import register_tiled_blocks
from convsuite.backends.cupy.algorithms.pointwise import splitk_tiles
from convsuite.backends.cupy_backend import CupyBackend

GPU = CupyBackend()


@pytest.fixture(autouse=True)
def _tensor_cores_admitted():
    """The hand rule's classes as written, tensor-core lines included: under the 'high' precision policy.

    ``test_highest_precision_takes_the_next_line_of_the_rule`` checks the default policy.
    """
    with cs.use_precision("high"):
        yield


def _spec(x_shape, w_shape, dtype=np.float32, **kw):
    """The validated spec of a call with these shapes (no data: np.empty)."""
    return cs.explain(np.empty(x_shape, dtype), np.empty(w_shape, dtype), backend="numpy", **kw).spec


def _pick(x_shape, w_shape, direction="forward", dtype=np.float32, **kw):
    return GPU.choose_algorithm(_spec(x_shape, w_shape, dtype, **kw), direction)


# (what the layer is, x shape, w shape, keywords, the intended algorithm, a phrase of its reason)
FORWARD_CLASSES = [
    # 1-D, stride 1
    ("signal 2e5 k5 same", (200_000,), (5,), dict(padding="same"), "blocked", "1-D, stride 1"),
    ("1-D C8 k31", (1, 8, 100_000), (8, 8, 31), {}, "blocked", "1-D, stride 1"),
    # 1x1 stride 1, short reduction (<= 32 input channels per group)
    ("1x1 24->144 56x56 B1", (1, 24, 56, 56), (144, 24, 1, 1), {}, "pointwise", "24 input channels"),
    ("1x1 24->144 56x56 B64", (64, 24, 56, 56), (144, 24, 1, 1), {}, "pointwise", "24 input channels"),
    ("1x1 8->256 28x28", (1, 8, 28, 28), (256, 8, 1, 1), {}, "pointwise", "8 input channels"),
    ("1x1 16->8 12x12 B4", (4, 16, 12, 12), (8, 16, 1, 1), {}, "pointwise", "16 input channels"),
    ("1x1 depthwise C256", (1, 256, 12, 12), (256, 1, 1, 1), dict(groups=256), "pointwise", "1 input channel per"),
    # 1x1 stride 1, >= 32 input channels, little work (<= 264 32x32 tiles): the split reduction
    ("1x1 32->8 12x12 B4", (4, 32, 12, 12), (8, 32, 1, 1), {}, "pointwise_splitk", "32 input channels"),
    ("1x1 96->24 56x56 B1", (1, 96, 56, 56), (24, 96, 1, 1), {}, "pointwise_splitk", "98 32x32 tiles"),
    ("1x1 160->960 7x7 B1", (1, 160, 7, 7), (960, 160, 1, 1), {}, "pointwise_splitk", "160 input channels"),
    ("1x1 384->96 14x14", (1, 384, 14, 14), (96, 384, 1, 1), {}, "pointwise_splitk", "reduction split"),
    ("1x1 576->160 7x7", (1, 576, 7, 7), (160, 576, 1, 1), {}, "pointwise_splitk", "reduction split"),
    ("classifier 1280->1000", (1, 1280, 1, 1), (1000, 1280, 1, 1), {}, "pointwise_splitk", "32 tiles"),
    ("1x1 512->512 4x4 B2", (2, 512, 4, 4), (512, 512, 1, 1), {}, "pointwise_splitk", "32 tiles"),
    # 1x1 stride 1, more work than that, more than 32 output channels: tf32x3 (float32, precision 'high')
    ("1x1 96->48 56x56 B4", (4, 96, 56, 56), (48, 96, 1, 1), {}, "tf32x3", "too many to split"),
    ("1x1 384->96 28x28 B4", (4, 384, 28, 28), (96, 384, 1, 1), {}, "tf32x3", "384 input channels"),
    ("1-D k1 256->256 L4000 B8", (8, 256, 4000), (256, 256, 1), {}, "tf32x3", "too many to split"),
    # 1x1 stride 1, past the split's tiles, at most 32 output channels: the 64x64 implicit GEMM below
    # the big tiles, and the big tiles with enough work
    ("1x1 96->24 56x56 B4", (4, 96, 56, 56), (24, 96, 1, 1), {}, "fused_gemm", "96 input channels"),
    ("1x1 96->24 56x56 B64", (64, 96, 56, 56), (24, 96, 1, 1), {}, "igemm_big", "1x1 with 1568 big block tiles"),
    ("1x1 512->2048 28x28 B8", (8, 512, 28, 28), (2048, 512, 1, 1), {}, "tf32x3", "too many to split"),
    # depthwise
    ("dw 3x3 s2 C144 56x56", (1, 144, 56, 56), (144, 1, 3, 3), dict(stride=2, padding=1, groups=144), "depthwise", ""),
    ("dw 3x3 C960 7x7", (1, 960, 7, 7), (960, 1, 3, 3), dict(padding=1, groups=960), "depthwise", "per group"),
    ("dw 5x5 x2 multiplier", (2, 16, 20, 20), (32, 1, 5, 5), dict(groups=16, padding=2), "depthwise", "per group"),
    # narrow stride-1 layers whose image fits shared memory and one round of a block's warps:
    # tf32x3_image, whatever the batch
    ("ECE408 fa19 conv2 B10000", (10_000, 12, 22, 22), (24, 12, 5, 5), {}, "tf32x3_image", "12->24 channels"),
    ("ECE408 fa19 conv2 B8", (8, 12, 22, 22), (24, 12, 5, 5), {}, "tf32x3_image", "one image in shared memory"),
    ("ECE408 fa19 conv2 B1", (1, 12, 22, 22), (24, 12, 5, 5), {}, "tf32x3_image", "tensor cores"),
    ("LeNet conv2 B1", (1, 6, 14, 14), (16, 6, 5, 5), {}, "tf32x3_image", "6->16 channels"),
    # ... an image of several rounds from about one image per multiprocessor
    ("ECE408 fa21 conv2 B132", (132, 4, 40, 40), (16, 4, 7, 7), {}, "tf32x3_image", "4->16 channels"),
    ("8->16 5x5 pad2 28x28 B128", (128, 8, 28, 28), (16, 8, 5, 5), dict(padding=2), "tf32x3_image", "8->16"),
    # ... below that, register_tiled from 16 blocks (stride 1, several input channels)
    ("ECE408 fa21 conv2 B8", (8, 4, 40, 40), (16, 4, 7, 7), {}, "register_tiled", "16 blocks"),
    ("fa21 conv2 B16", (16, 4, 40, 40), (16, 4, 7, 7), {}, "register_tiled", "32 blocks"),
    ("8->16 5x5 pad2 28x28 B64", (64, 8, 28, 28), (16, 8, 5, 5), dict(padding=2), "register_tiled", ""),
    ("4->16 3x3 56x56 B8", (8, 4, 56, 56), (16, 4, 3, 3), dict(padding=1), "register_tiled", "32 blocks"),
    # few output channels, enough blocks for register_tiled (an image too large for tf32x3_image, float64)
    ("40->24 5x5 22x22 B10000", (10_000, 40, 22, 22), (24, 40, 5, 5), {}, "register_tiled", "10000 blocks"),
    ("float64 fa19 conv2 B10000", (10_000, 12, 22, 22), (24, 12, 5, 5), dict(dtype=np.float64), "register_tiled", ""),
    ("ECE408 fa21 conv1 B10000", (10_000, 1, 86, 86), (4, 1, 7, 7), {}, "register_tiled", "70000 blocks"),
    ("16->8 5x5 40x40 B64", (64, 16, 40, 40), (8, 16, 5, 5), dict(padding=2), "register_tiled", "128 blocks"),
    ("8->12 3x3 s2 45x45 B64", (64, 8, 45, 45), (12, 8, 3, 3), dict(stride=2, padding=1), "register_tiled", ""),
    # one input channel, too few blocks for register_tiled: the depthwise kernel
    ("ECE408 fa19 conv1 B8", (8, 1, 48, 48), (12, 1, 5, 5), {}, "depthwise", "one input channel"),
    ("ECE408 fa21 conv1 B8", (8, 1, 86, 86), (4, 1, 7, 7), {}, "depthwise", "one input channel"),
    ("C1->256 3x3 56x56 B16", (16, 1, 56, 56), (256, 1, 3, 3), dict(padding=1), "depthwise", "one input channel"),
    # small stride-1 layers with few channels (tf32x3_image declines: float64, or fewer than 4 channels): tiled_shared
    ("float64 fa19 conv2 B8", (8, 12, 22, 22), (24, 12, 5, 5), dict(dtype=np.float64), "tiled_shared", "12->24"),
    ("ECE408 fa21 conv2 B2", (2, 4, 40, 40), (16, 4, 7, 7), {}, "tiled_shared", "4->16 channels"),
    ("3->16 5x5 22x22 B8", (8, 3, 22, 22), (16, 3, 5, 5), {}, "tiled_shared", "3->16 channels"),
    ("32->32 5x5 12x12 B16", (16, 32, 12, 12), (32, 32, 5, 5), dict(padding=2), "tiled_shared", "32->32"),
    # strided or wider small layers: fused_gemm
    ("3x3 s3 C16->16 40x40 B2", (2, 16, 40, 40), (16, 16, 3, 3), dict(stride=3), "fused_gemm", "reduction of 144"),
    ("stem 3x3 s2 C3->32 224", (1, 3, 224, 224), (32, 3, 3, 3), dict(stride=2, padding=1), "fused_gemm", ""),
    ("5x5 s2 C32->64 33x33 B4", (4, 32, 33, 33), (64, 32, 5, 5), dict(stride=2, padding=2), "fused_gemm", ""),
    ("3x3 C96->8 s2 12x12 B16", (16, 96, 12, 12), (8, 96, 3, 3), dict(stride=2, padding=1), "fused_gemm", ""),
    ("3x3 s2 C64->64 20x20 B2", (2, 64, 20, 20), (64, 64, 3, 3), dict(padding=1, stride=2), "fused_gemm", "576"),
    # stride 1, 64 output channels or more, few tiles: tf32x3 all the same
    ("3x3 C64->64 20x20 B2", (2, 64, 20, 20), (64, 64, 3, 3), dict(padding=1), "tf32x3", "7 block tiles"),
    ("1-D k7 C128 L2048 B1", (1, 128, 2048), (128, 128, 7), dict(padding=3), "tf32x3", "tensor cores"),
    # a small 3x3 layer: not tiled_shared (9 multiply-adds per barrier)
    ("3x3 C16->32 32x32 B8", (8, 16, 32, 32), (32, 16, 3, 3), dict(padding=1), "fused_gemm", "reduction of 144"),
    # enough work for the big tiles
    ("3x3 C64 56x56 B64", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), "tf32x3", "1568 block tiles"),
    ("3x3 C256 14x14 B64", (64, 256, 14, 14), (256, 256, 3, 3), dict(padding=1), "tf32x3", "tensor cores"),
    ("5x5 s2 C16->32 B64", (64, 16, 64, 64), (32, 16, 5, 5), dict(stride=2, padding=2), "igemm_big", "big block"),
    ("fa21 conv2 B16 float64", (16, 4, 40, 40), (16, 4, 7, 7), dict(dtype=np.float64), "register_tiled", ""),
]


@pytest.mark.parametrize(
    "what, x_shape, w_shape, kw, expected, reason", FORWARD_CLASSES, ids=[c[0] for c in FORWARD_CLASSES]
)
def test_forward_class_picks_its_algorithm(what, x_shape, w_shape, kw, expected, reason):
    spec = _spec(x_shape, w_shape, **kw)
    name, why = GPU.choose_algorithm(spec, "forward")
    assert (name, reason in why) == (expected, True), (what, name, why)
    assert GPU.can_run(spec, name, "forward") is True


BACKWARD_CLASSES = [
    ("dw 3x3 s2 C64 28x28 B4", (4, 64, 28, 28), (64, 1, 3, 3), dict(stride=2, padding=1, groups=64), "depthwise"),
    ("dw 3x3 s2 C144 B64", (64, 144, 56, 56), (144, 1, 3, 3), dict(stride=2, padding=1, groups=144), "depthwise"),
    # 1x1 backward has no cuBLAS line: small -> fused_gemm, large -> tf32x3
    ("1x1 C64->128 14x14 B4", (4, 64, 14, 14), (128, 64, 1, 1), {}, "fused_gemm"),
    ("1x1 C128->256 28x28 B64", (64, 128, 28, 28), (256, 128, 1, 1), {}, "tf32x3"),
    ("1x1 C1280->1000 1x1", (1, 1280, 1, 1), (1000, 1280, 1, 1), {}, "fused_gemm"),
    ("1x1 C512->256 14x14 B32 (98 tiles)", (32, 512, 14, 14), (256, 512, 1, 1), {}, "tf32x3"),
    # strided 1-D: the im2col of a signal is short, cuBLAS takes both products
    ("1-D k3 s2 C512 L1600 B32", (32, 512, 1600), (512, 512, 3), dict(stride=2), "im2col_gemm"),
    ("1-D k5 s3 C64 L300 B1", (1, 64, 300), (128, 64, 5), dict(stride=3, padding=2), "im2col_gemm"),
    ("3x3 C32 28x28 B4", (4, 32, 28, 28), (32, 32, 3, 3), dict(padding=1), "fused_gemm"),
    ("ECE408 fa19 conv2 B4", (4, 12, 22, 22), (24, 12, 5, 5), {}, "fused_gemm"),
    ("3x3 C64 56x56 B64", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), "tf32x3"),
    ("ECE408 fa21 conv2 B1000", (1000, 4, 40, 40), (16, 4, 7, 7), {}, "tf32x3"),  # dW on 16-row tiles
    ("float64 3x3 C64 B64", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1, dtype=np.float64), "fused_gemm"),
]


@pytest.mark.parametrize("what, x_shape, w_shape, kw, expected", BACKWARD_CLASSES, ids=[c[0] for c in BACKWARD_CLASSES])
def test_backward_class_picks_its_algorithm(what, x_shape, w_shape, kw, expected):
    spec = _spec(x_shape, w_shape, **kw)
    name, why = GPU.choose_algorithm(spec, "backward")
    assert name == expected and why, (what, name, why)
    assert GPU.can_run(spec, name, "backward") is True


def test_backward_tensor_core_line_starts_at_its_tile_count():
    """tf32x3 takes a backward pass from TF32X3_BACKWARD_TILES big block tiles; below it, the GEMM lines."""
    least = rule.TF32X3_BACKWARD_TILES
    for batch, expected in ((least - 1, "fused_gemm"), (least, "tf32x3")):
        spec = _spec((batch, 128, 16, 8), (64, 128, 3, 3), padding=1)  # 128 pixels: one column tile per image
        assert rule.big_tiles(spec.as_2d()) == batch
        assert GPU.choose_algorithm(spec, "backward")[0] == expected, batch


def test_pointwise_reduction_thresholds():
    """Past the split-K's tiles, with at most 32 output channels (tf32x3's tile half idle): <= 32 input
    channels per group the pointwise kernel; 33..255 fused_gemm; >= 256 cuBLAS. With more outputs, from
    32 input channels, tf32x3. Within the split's tiles, from 32 channels: pointwise_splitk."""
    most, long_ = rule.POINTWISE_MOST, rule.POINTWISE_GEMM_FROM
    big = (4, 56, 56)  # 4 x 98 pixel tiles x 1 channel tile = 392 > SPLITK_MOST_TILES
    assert _pick((big[0], most, *big[1:]), (32, most, 1, 1))[0] == "pointwise"
    assert _pick((big[0], most + 1, *big[1:]), (32, most + 1, 1, 1))[0] == "fused_gemm"
    assert _pick((big[0], long_ - 1, *big[1:]), (32, long_ - 1, 1, 1))[0] == "fused_gemm"
    assert _pick((big[0], long_, *big[1:]), (32, long_, 1, 1))[0] == "pointwise_gemm"
    assert _pick((big[0], most - 1, *big[1:]), (48, most - 1, 1, 1))[0] == "pointwise"  # tf32x3: reduction < 32
    assert _pick((big[0], most, *big[1:]), (48, most, 1, 1))[0] == "tf32x3"
    assert _pick((big[0], long_, *big[1:]), (48, long_, 1, 1))[0] == "tf32x3"
    with cs.use_precision("highest"):
        assert _pick((big[0], long_, *big[1:]), (48, long_, 1, 1))[0] == "pointwise_gemm"
    # per group: 4 groups of 64 channels is a 64-channel reduction
    assert _pick((1, 256, 56, 56), (96, 64, 1, 1), groups=4)[0] == "fused_gemm"
    # within the split's tiles (14x14, batch 1: 7 x 3 = 21): from SPLITK_FROM channels per group
    first = rule.SPLITK_FROM
    assert _pick((1, first - 1, 14, 14), (96, first - 1, 1, 1))[0] == "pointwise"
    assert _pick((1, first, 14, 14), (96, first, 1, 1))[0] == "pointwise_splitk"
    assert _pick((1, long_, 14, 14), (96, long_, 1, 1))[0] == "pointwise_splitk"
    # the tile bound itself
    most_tiles = rule.SPLITK_MOST_TILES
    spec = _spec((1, 64, 1, 32 * most_tiles), (32, 64, 1, 1))  # most_tiles pixel tiles x 1 channel tile
    assert splitk_tiles(spec.as_2d()) == most_tiles
    assert GPU.choose_algorithm(spec, "forward")[0] == "pointwise_splitk"
    spec = _spec((1, 64, 1, 32 * most_tiles + 1), (32, 64, 1, 1))
    assert GPU.choose_algorithm(spec, "forward")[0] != "pointwise_splitk"


def test_tf32x3_line_needs_a_full_tile_float32_and_a_long_reduction():
    """Fat float32 layers go to the tensor cores; float64, 32 output channels or < 32 products do not."""
    assert _pick((64, 64, 56, 56), (64, 64, 3, 3), padding=1)[0] == "tf32x3"
    assert _pick((64, 64, 56, 56), (64, 64, 3, 3), padding=1, dtype=np.float64)[0] == "fused_gemm"
    assert _pick((64, 64, 56, 56), (63, 64, 3, 3), padding=1)[0] == "igemm_big"  # 63 < 64 rows
    assert _pick((64, 3, 112, 112), (64, 3, 3, 3), padding=1)[0] == "igemm_big"  # 27 products: declines


def test_tf32x3_declines_gpus_without_tf32_tensor_cores(monkeypatch):
    """Below compute capability 8.0 (Turing) tf32x3 says why and auto moves on; without a GPU nothing declines."""
    from convsuite.backends import _cupy_runtime

    spec = _spec((64, 64, 56, 56), (64, 64, 3, 3), padding=1)
    monkeypatch.setattr(_cupy_runtime, "compute_capability", lambda: 75)
    why = GPU.can_run(spec, "tf32x3", "forward")
    assert "sm_75" in why and "8.0" in why and "igemm_big" in why
    assert GPU.choose_algorithm(spec, "forward")[0] == "igemm_big"
    assert GPU.choose_algorithm(spec, "backward")[0] == "igemm_big"
    monkeypatch.setattr(_cupy_runtime, "compute_capability", lambda: 90)
    assert GPU.can_run(spec, "tf32x3", "forward") is True
    monkeypatch.setattr(_cupy_runtime, "compute_capability", lambda: None)
    assert GPU.choose_algorithm(spec, "forward")[0] == "tf32x3"


def test_pointwise_class_in_float64_never_takes_the_float32_kernel():
    """igemm_big is float32 only: a large float64 1x1 layer goes to the 64x64 implicit GEMM (or cuBLAS)."""
    assert _pick((64, 96, 56, 56), (24, 96, 1, 1), dtype=np.float64)[0] == "fused_gemm"
    assert _pick((1, 384, 14, 14), (96, 384, 1, 1), dtype=np.float64)[0] == "pointwise_gemm"
    assert _pick((1, 24, 14, 14), (144, 24, 1, 1), dtype=np.float64)[0] == "pointwise"


def test_register_tiled_needs_enough_blocks():
    """ECE408 fa19 conv2 has one register_tiled block per image: the batch is the block count. A stride-1
    layer of several input channels needs REGISTER_TILED_SEVERAL_CHANNELS_BLOCKS; one input channel or a
    stride, REGISTER_TILED_BLOCKS."""
    need = rule.REGISTER_TILED_SEVERAL_CHANNELS_BLOCKS
    for batch in (1, 8, need - 1, need, 4 * need):
        assert register_tiled_blocks(_spec((batch, 12, 22, 22), (24, 12, 5, 5))) == batch
    # float64 (tf32x3_image declines it), one block short: the next class that fits (5x5: tiled_shared)
    assert _pick((need - 1, 12, 22, 22), (24, 12, 5, 5), dtype=np.float64)[0] == "tiled_shared"
    assert _pick((need, 12, 22, 22), (24, 12, 5, 5), dtype=np.float64)[0] == "register_tiled"
    # A stride keeps the larger threshold: 8->12 3x3 s2 on 45x45 (23x23 outputs, one block per image)
    strided = rule.REGISTER_TILED_BLOCKS
    for batch in (need, strided - 1, strided):
        spec = ((batch, 8, 45, 45), (12, 8, 3, 3))
        assert register_tiled_blocks(_spec(*spec, stride=2, padding=1)) == batch
        assert (_pick(*spec, stride=2, padding=1)[0] == "register_tiled") == (batch >= strided), batch


def test_register_tiled_blocks_geometry():
    """Blocks = (image, group) x output tiles x channel blocks of the launch at REGISTER_PX outputs per thread."""
    # 3x3 s3 on 40x40: a 13x13 output is one tile; 16 channels, one MT=16 block; 2 images
    assert register_tiled_blocks(_spec((2, 16, 40, 40), (16, 16, 3, 3), stride=3)) == 2
    # fa21 conv1 at batch 8: 80x80 outputs in 7 tiles of 80x12
    assert register_tiled_blocks(_spec((8, 1, 86, 86), (4, 1, 7, 7))) == 56
    # 48 output channels per group take two MT=24 channel blocks: 1 image x 2 groups x 1 tile x 2
    assert register_tiled_blocks(_spec((1, 8, 22, 22), (96, 4, 5, 5), groups=2)) == 4


def test_register_tiled_never_takes_a_1x1_or_wide_layer():
    """A 1x1 kernel gives register_tiled no reuse of its patch; more than 24 channels per group leave its class."""
    assert _pick((64, 96, 56, 56), (24, 96, 1, 1))[0] != "register_tiled"
    assert _pick((64, 96, 28, 28), (24, 96, 1, 1), stride=2)[0] != "register_tiled"  # strided 1x1
    assert _pick((10_000, 12, 22, 22), (32, 12, 5, 5))[0] == "igemm_big"


def test_tiled_shared_bounds():
    """tiled_shared only for stride 1, <= 32 channels per group in and out, under the big-tile threshold."""
    base = ((8, 12, 22, 22), (24, 12, 5, 5))
    assert _pick(*base, dtype=np.float64)[0] == "tiled_shared"  # float32: tf32x3_image's line comes first
    assert _pick(*base, stride=2)[0] == "fused_gemm"
    assert _pick((8, 33, 22, 22), (24, 33, 5, 5))[0] == "fused_gemm"  # its image is too large for tf32x3_image
    assert _pick((8, 12, 22, 22), (33, 12, 5, 5))[0] == "fused_gemm"
    # 32 filters (outside register_tiled's class): tiled_shared while the work is small, then the big tiles
    assert _pick((40, 12, 22, 22), (32, 12, 5, 5))[0] == "tiled_shared"
    assert rule.big_tiles(_spec((64, 12, 22, 22), (32, 12, 5, 5)).as_2d()) >= rule.BIG_ENOUGH
    assert _pick((64, 12, 22, 22), (32, 12, 5, 5))[0] == "igemm_big"


def test_single_input_channel_layers():
    """Small batch: the depthwise kernel (one input channel); a full GPU of register tiles: register_tiled."""
    assert _pick((8, 1, 48, 48), (12, 1, 5, 5))[0] == "depthwise"
    assert _pick((10_000, 1, 48, 48), (12, 1, 5, 5))[0] == "register_tiled"
    # more than 24 filters leave the register_tiled class whatever the batch
    assert _pick((64, 1, 56, 56), (64, 1, 3, 3), padding=1)[0] == "depthwise"


def test_declined_algorithms_fall_through_to_the_next_rule():
    """The rule skips an algorithm that cannot run the case, with the next class rule's choice."""
    big_1x1 = _spec((4, 384, 28, 28), (96, 384, 1, 1))
    with cs.use_precision("highest"), graph_capture():  # cuBLAS is declined while a CUDA graph is captured
        assert "cuBLAS" in GPU.can_run(big_1x1, "pointwise_gemm", "forward")
        assert GPU.choose_algorithm(big_1x1, "forward")[0] == "fused_gemm"
    small_1x1 = _spec((1, 384, 14, 14), (96, 384, 1, 1))
    assert rule.choose(small_1x1, "forward", lambda s, a, d: a != "pointwise_splitk" or "no")[0] == "pointwise_gemm"
    seen = []

    def declines(*names):
        def can_run(spec, algorithm, direction):
            seen.append(algorithm)
            return "declined by the test" if algorithm in names else True

        return can_run

    small = _spec((8, 12, 22, 22), (24, 12, 5, 5))
    assert rule.choose(small, "forward", declines("tf32x3_image"))[0] == "tiled_shared"
    assert seen[0] == "tf32x3_image"
    first = ("tf32x3_image", "tiled_shared")
    assert rule.choose(small, "forward", declines(*first))[0] == "fused_gemm"
    assert rule.choose(small, "forward", declines(*first, "fused_gemm")) == (
        "im2col_gemm",
        "fallback: im2col + cuBLAS",
    )
    assert rule.choose(small, "forward", declines(*first, "fused_gemm", "im2col_gemm"))[0] == "direct"
    signal = _spec((1, 1, 1000), (1, 1, 7))
    assert rule.choose(signal, "forward", declines("blocked"))[0] != "blocked"


def test_rule_picks_run_and_are_deterministic_on_a_spread_of_cases():
    """On random shapes in both dtypes and directions, the pick can run, is auto-eligible and says why."""
    rng = np.random.default_rng(10)
    for _ in range(200):
        groups = int(rng.choice([1, 1, 2, 4]))
        depthwise = rng.random() < 0.2
        c = int(rng.choice([1, 3, 8, 16, 32, 64, 256])) * groups
        m = int(rng.choice([4, 8, 24, 32, 96, 256])) * groups
        if depthwise:
            c, groups = m, m
        k = int(rng.choice([1, 3, 5, 7]))
        size = int(rng.integers(k, 40))
        dtype = np.float32 if rng.random() < 0.7 else np.float64
        kw = dict(stride=int(rng.choice([1, 1, 2, 3])), padding=int(rng.integers(0, k)), groups=groups)
        batch = int(rng.choice([1, 2, 8, 64]))
        if rng.random() < 0.25:  # 1-D
            spec = _spec((batch, c, size * 50), (m, c // groups, k), dtype, **kw)
        else:
            spec = _spec((batch, c, size, size), (m, c // groups, k, k), dtype, **kw)
        for direction in ("forward", "backward"):
            name, why = GPU.choose_algorithm(spec, direction)
            assert GPU.can_run(spec, name, direction) is True, (spec, direction, name)
            assert RECORDS[name].deterministic and why, (name, why)


@pytest.mark.parametrize("direction, cases", [("forward", FORWARD_CLASSES), ("backward", BACKWARD_CLASSES)])
def test_highest_precision_takes_the_next_line_of_the_rule(direction, cases):
    """Under 'highest' (the default) auto never picks a TF32 algorithm; every other class keeps its pick."""
    with cs.use_precision("highest"):
        for what, x_shape, w_shape, kw, expected, *_ in cases:
            spec = _spec(x_shape, w_shape, **kw)
            name, why = GPU.choose_algorithm(spec, direction)
            assert RECORDS[name].precision == "highest", (what, name)
            assert GPU.can_run(spec, name, direction) is True
            if RECORDS[expected].precision == "highest":
                assert name == expected, (what, name, why)


@pytest.mark.parametrize(
    "x_shape, w_shape, kw",
    [
        ((32, 256, 1000), (256, 256, 7), dict(padding=3)),  # a speech encoder's K=7 layer
        ((8, 512, 400), (512, 512, 3), dict(padding=2, dilation=2)),  # a dilated residual layer
        ((32, 768, 49), (768, 48, 128), dict(padding=64, groups=16)),  # a grouped positional conv
    ],
)
def test_one_d_layers_with_channels_go_to_the_implicit_gemms(x_shape, w_shape, kw):
    """blocked walks one signal per channel pair: a layer of hundreds of channels is a GEMM's work."""
    name, why = _pick(x_shape, w_shape, **kw)
    assert name in ("tf32x3", "igemm_big", "fused_gemm"), (name, why)
    assert _pick((1, 8, 100_000), (8, 8, 31))[0] == "blocked"  # few channels: still the signal kernel


@pytest.mark.parametrize("precision", ["highest", "high"])
@pytest.mark.parametrize(
    "x_shape, w_shape, kw",
    [
        ((32, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3)),  # ResNet's stem
        ((32, 3, 224, 224), (32, 3, 3, 3), dict(stride=2, padding=1)),  # a 3x3 stride-2 stem
        ((32, 3, 224, 224), (96, 3, 4, 4), dict(stride=4)),  # ConvNeXt's patchify stem
        ((32, 96, 56, 56), (192, 96, 2, 2), dict(stride=2)),  # ConvNeXt's downsampling: non-overlapping patches
    ],
)
def test_backward_of_stems_and_patches_takes_im2col_gemm(x_shape, w_shape, kw, precision):
    with cs.use_precision(precision):
        name, why = _pick(x_shape, w_shape, "backward", **kw)
    assert name == "im2col_gemm" and "long, thin GEMM" in why
    # an ordinary 3x3 layer of many channels keeps the implicit GEMMs' backward
    with cs.use_precision(precision):
        assert _pick((32, 64, 56, 56), (64, 64, 3, 3), "backward", padding=1)[0] != "im2col_gemm"
