"""The cupy backend's hand rule: which CUDA algorithm ``algorithm="auto"`` runs for a layer.

The rule sorts a layer into a class by what decides the speed of the
kernels on it -- kernel size, stride, channels per group (the length of each
output's reduction over channels), output channels per group (how much of a
GEMM tile is used) and how many thread blocks a kernel's launch has (whether
the GPU is filled) -- and names, per class, the algorithm the measurements
show fastest. It reads only the spec, so it is evaluated and tested without
a GPU. Each threshold below cites the measurements it comes from:

``regret-gpu.md``
    docs/measurements/regret-gpu.md at tag notebook-2026-11-28: H100, the held-out problems (ECE408
    layers at batch 8, MobileNetV2-1.0 layers at batch 1, strided, 1-D,
    backward), every candidate timed side by side; the fastest and the old
    rule's pick with its ratio.
``i11``
    docs/measurements/gpu-targets-i11-2026-11-21.md at tag notebook-2026-11-28: H200, the ablation of
    every algorithm at batch 64 (10,000 for ECE408), kernel times.
``crossover log``
    docs/measurements/device-2026-11-22/bench-crossover-timeout.log: H200,
    the fastest algorithm on the first 32 problems of the crossover grid (the
    run was cut off; winners only, no ratios). It ran before commit b0625c5
    removed ~8 us of per-call zero-bias lookup from every custom kernel's
    launch (not from the cuBLAS paths), so its cuBLAS wins on tiny problems
    are weak evidence; its wins among custom kernels stand.
``tuned-vs-default``
    docs/measurements/tuned-vs-default-gpu-2026-11-22.json: H200, batch 64,
    kernel times per algorithm at its default parameters.
``sweep-h100``
    docs/measurements/sweep-gpu-h100-2026-11-22/README.md: H100, ECE408 at
    batch 10,000, each algorithm's default time.
``targets-1121``
    docs/measurements/gpu-targets-2026-11-21.md at tag notebook-2026-11-28: H200, MobileNetV2 layers at
    batch 1 (kernels of that day: fused_gemm and im2col + cuBLAS only).
``backward-2026-11-26``
    docs/measurements/gpu-kernels-2026-11-26.md: H200, the device time of
    every kernel of a backward call per algorithm (CUPTI,
    tools/backward_phases.py at tag notebook-2026-11-28) and the round-two GPU targets table (i11),
    after tf32x3's weight gradient got row tiles that fit thin layers.
``tf32x3-image``
    docs/measurements/tf32x3-image-batches-2026-11-26-h100.md: H100,
    tools/tf32x3_image_batches.py at tag notebook-2026-11-28: four narrow layers at batches 16 to
    4,096, every candidate's kernel time against cuDNN; and
    docs/measurements/gpu-targets-2026-11-26d-h100-ece408.md at tag notebook-2026-11-28 (i11
    table, the ECE408 and 1-D targets).
``tf32x3-image-small``
    docs/measurements/tf32x3-image-small-batches-2026-11-26-h100.md: H100,
    tools/tf32x3_image_batches.py at tag notebook-2026-11-28, batches 1 to 132 after register_tiled's
    shifted inputs and small-grid px (register-tiled-2026-11-26.md): five
    narrow layers, every candidate's kernel time, the rule's pick before and
    after the lines that cite it.
``tf32x3``
    docs/measurements/tf32x3-2026-11-22.md: H100, tf32x3 against igemm_big
    and cuDNN on 3x3 layers at batch 64 and the ECE408 conv2 layers at
    batch 10,000, forward and backward, CUDA events through the public API.

The thresholds count thread blocks against the 132 multiprocessors of the
H100 and H200 the data come from; a much smaller GPU fills with fewer.
"""

from __future__ import annotations

import math
from typing import Callable

from .._spec import ConvSpec
from .base import Verdict
from .cupy.algorithms.conv2d import register_tiled_blocks
from .cupy.algorithms.pointwise import splitk_tiles
from .cupy.algorithms.tf32x3_image import TF32X3_IMAGE_MAX_CHANNELS, TF32X3_IMAGE_MAX_WARPS

__all__ = ["choose", "big_tiles"]

#: Block tiles of igemm_big (about one per multiprocessor) from which it beats
#: the 64x64 fused_gemm: i11, 3x3 C=M=64 B=64 0.785 vs 1.006 ms, 1x1 96->24
#: B=64 0.136 vs 0.212 ms, ECE408 fa19 conv2 B=10000 4.55 vs 8.05 ms; below
#: it fused_gemm was the fastest of all (regret-gpu.md: the 3x3 s2 stem
#: (98 tiles), 5x5 s2 C32->64 (10 tiles), backward 3x3 C32 (25 tiles)).
BIG_ENOUGH = 128

#: Input channels per group up to which the ``pointwise`` kernel wins a 1x1
#: layer. Each of its threads walks all C/g input channels in sequence, about
#: 0.3-0.4 us per channel on the H100 when few blocks run (regret-gpu.md: 96
#: channels 54 us, 384 -> 166 us, 576 -> 225 us with 3-5 blocks); a GEMM tile
#: takes 16 channels per step. Won at 1 to 32 (crossover log: C1 M96, C32 M8,
#: C8 M256, and 1x1 depthwise; regret-gpu.md 24->144 56x56; i11 24->144 B=64
#: 0.186 ms vs igemm_big 0.231); the one small-C/g loss is the crossover log's
#: C1 M8 28x28 (direct, margin unknown). Lost from 96 (regret-gpu.md 96->24
#: 56x56 x1.69, 384->96 x3.61, 576->160 x4.51; crossover log: all three C96
#: 1x1 problems). The held-out 32->192 28x28 went to fused_gemm with pointwise's
#: time not recorded; the per-channel cost above puts it near x1.2.
POINTWISE_MOST = 32

#: Input channels per group from which a 1x1 layer too small for igemm_big runs
#: fastest on cuBLAS (``pointwise_gemm``, which splits a long reduction across
#: blocks) rather than fused_gemm, whose time grows by a 16-channel slice per
#: step over a cuBLAS call's floor of ~46 us: regret-gpu.md, cuBLAS fastest at
#: 384->96 14x14 (46 us), 576->160 7x7 (50 us), 1280->1000 1x1 (46 us), and
#: the crossover log's C256 M96 4x4; fused_gemm fastest at 96->24 56x56 and
#: 32->192 28x28 (cuBLAS x1.64) and on two of the crossover log's three C96
#: problems (the third, C96 M96 12x12, went to cuBLAS by an unknown margin).
#: targets-1121 (batch 1) shows the same growth: fused_gemm 0.064 / 0.086 /
#: 0.145 ms at 384 / 576 / 1280 channels.
POINTWISE_GEMM_FROM = 256

#: Input channels per group from which a float32 1x1 layer with little work runs
#: fastest as ``pointwise_splitk`` (32x32 output tiles x slices of the reduction,
#: then a fixed-order sum). mnet-probe: H100, every MobileNetV2 1x1 layer at
#: batch 1 in a CUDA graph of 20 calls (pure GPU time, us; splitk / the old pick /
#: cuDNN): 960->160 7x7 10.4 / 100 / 26.1, 576->96 14x14 11.0 / 62 / 17.6, 192->32
#: 28x28 7.3 / 24.9 / 13.2, 144->24 56x56 11.2 / 19.5 / 10.6, 32->192 28x28 7.1 /
#: 15.5 (pointwise) / 5.9; fastest of every cupy algorithm on all 1x1 layers with
#: 32 or more input channels, cuDNN-FP32 summed 408 us, splitk 291. Below 32
#: channels (16->96 112x112, 24->144 56x56) pointwise or fused_gemm stayed ahead.
SPLITK_FROM = 32

#: Most 32x32 output tiles for which ``pointwise_splitk`` is picked: two per
#: multiprocessor of the 132-SM H100/H200, the grid it fills by splitting the
#: reduction. Past it there is no split and a 64x64 GEMM tile does more per load
#: (the probe's one larger layer, 32->16 112x112 with 392 tiles, was not
#: decided by this line: 32 channels went to pointwise there).
SPLITK_MOST_TILES = 264

#: Thread blocks register_tiled's launch needs before it is the fastest on a
#: layer with few output channels. It gives each thread MT channels x 4 pixels
#: over the whole reduction, so a small grid leaves the GPU idle: with 2 to 16
#: blocks it lost (regret-gpu.md: strided 3x3 s3 C16 2 blocks x4.33 to
#: fused_gemm; fa19 conv2 B=8 8 blocks x2.16 and fa21 conv2 B=8 16 blocks x1.38
#: to tiled_shared); with 128 it was 3.3x faster than tiled_shared
#: (tuned-vs-default 16->8 5x5 B=64: 0.107 vs 0.351 ms) and at ECE408 batch
#: 10,000 (thousands of blocks) the fastest of all (i11, sweep-h100). Between
#: 16 and 128 blocks only one-input-channel layers were measured (fa21 conv1
#: B=8, 56 blocks: x1.26 to depthwise, which the one-channel line takes), and
#: 8->12 3x3 s2 B=64 (64 blocks, 0.070 ms, the others' times not recorded):
#: 64 is about half the multiprocessors.
REGISTER_TILED_BLOCKS = 64

#: The same for stride-1 layers of several input channels per group, since register_tiled
#: loads one input per tap on unit stride and takes fewer outputs per thread on
#: small grids (register-tiled-2026-11-26). tf32x3-image-small (kernel times,
#: H100): ECE408 fa21 conv2 at 16 and 32 blocks (batches 8, 16) the fastest of
#: all (0.030 ms; tiled_shared 0.041 and 0.063), 5x5 C8->16 28x28 from batch 8
#: the fastest (0.031-0.038 ms); at 8 blocks and fewer (batches 1-4) tiled_shared
#: was 3-12% faster. One-input-channel layers keep REGISTER_TILED_BLOCKS: the
#: depthwise kernel was the fastest on them at batch 8 (regret-gpu, fa19 and
#: fa21 conv1: 15 and 16 us), with register_tiled not measured there since;
#: strided layers keep it too (none of them measured at so few blocks).
REGISTER_TILED_SEVERAL_CHANNELS_BLOCKS = 16

#: Output channels per group from which tf32x3 (error-compensated TF32 on the
#: tensor cores, the "high" precision class) replaces igemm_big on layers with
#: BIG_ENOUGH tiles, forward: its 64-row block tile is full (backward, its
#: weight gradient takes row tiles that fit the layer: ``_backward_rules``).
#: tf32x3: forward 1.57x igemm_big on 3x3 C32->64 64x64 B=64, 1.61x on C64->64 56x56, 1.75x on
#: C128 28x28 and 1.84x on C256 14x14; backward 1.20-1.58x on the same
#: layers. With 32 output channels (5x5 s2 C16->32) half its tile idles and
#: it lost (0.87-0.90x); below 32 products per output it declines (its
#: tolerance), and float64 goes on to igemm_big's line.
TF32X3_FROM = 64

#: Block tiles from which a backward pass goes to tf32x3 (before the GEMM lines). zoo-gpu-2026-11-28-h200,
#: batch 32: 1x1 layers of 64 to 104 tiles (528->256 14x14, 2048->448 8x8, 464->1024 7x7) ran 1.5-1.7x
#: faster on tf32x3 or igemm_big than on fused_gemm, the pick below BIG_ENOUGH; fused_gemm stayed the
#: fastest at 25 tiles (regret-gpu.md, backward 3x3 C32).
TF32X3_BACKWARD_TILES = 64

#: Input channels from which a narrow stride-1 layer goes to ``tf32x3_image``
#: (one image in shared memory, pixels x channels tensor-core tiles; its
#: can_run bounds the rest: float32, groups 1, <= 32 output channels, a
#: reduction of >= 32, the image and weights in 113 KiB). tf32x3-image: the
#: fastest candidate at every batch from 16 to 4,096 on ECE408 fa19 conv2
#: (12->24 5x5: 1.29-2.02x cuDNN, register_tiled 0.65-1.26x), fa21 conv2
#: (4->16 7x7: 1.24-3.53x; at batch 16 tf32x3 was 5% faster) and 8->16 5x5
#: pad 2 28x28 (1.18-4.08x); i11 table (H100, batch 10,000): fa19 conv2
#: 1.36x cuDNN through the API against register_tiled's 1.02x, fa21 conv2
#: 3.62x against 2.31x. Not measured: one to three input channels (the first
#: layers, whose reduction is mostly under 32 anyway), strides, dilations.
TF32X3_IMAGE_FROM = 4

#: Most 32-pixel tile pairs (an image's outputs / 32) for which the rule takes
#: tf32x3_image: the measured layers had 10 to 37 (outputs of 18x18 to 34x34).
#: A larger image keeps one block busy for several rounds of its warps (and
#: below TF32X3_IMAGE_MULTI_ROUND_BATCH images, even 2-4 rounds lose: next line).
TF32X3_IMAGE_MOST_PAIRS = 40

#: Images from which tf32x3_image also takes a layer whose image needs its
#: warps for several rounds (more than TF32X3_IMAGE_MAX_WARPS pairs of 16-pixel
#: tiles). It runs one persistent block per image, so a smaller batch leaves
#: multiprocessors idle while one block walks its image round after round.
#: tf32x3-image-small (kernel times, batches 1 to 132): ECE408 fa21 conv2
#: (37 pairs, 4 rounds) 0.043-0.044 ms at batches 1-32 against register_tiled's
#: 0.028-0.033 and tiled_shared's 0.025-0.028 (1-4 images), even at 64 (0.047
#: vs 0.045), ahead at 132 (0.048 vs 0.052); 5x5 C8->16 28x28 (25 pairs,
#: 3 rounds): behind to 64 (0.043 vs 0.038), ahead at 132 (0.046 vs 0.049).
#: One-round images (fa19 conv2, LeNet conv2) were fastest with it at every
#: batch from 1. About one image per multiprocessor of the 132.
TF32X3_IMAGE_MULTI_ROUND_BATCH = 128

#: Output channels per group register_tiled covers with one register tile
#: (its largest MT): beyond it the 64-row GEMM tiles are well used.
REGISTER_TILED_MOST = 24

#: Channels per group (input and output) up to which ``tiled_shared`` wins a
#: small stride-1 layer: one thread per output, a barrier per input channel,
#: KH*KW multiply-adds per barrier, and B*M*tiles blocks, so it fills the GPU
#: where register_tiled's grid is too small and the GEMM tiles would be mostly
#: empty. Won: regret-gpu.md fa19 conv2 (12->24 5x5) and fa21 conv2 (4->16 7x7)
#: at batch 8; crossover log B16 C32 M32 12x12 k5. It is confined to problems
#: under BIG_ENOUGH tiles: on large ones it is 3-10x slower than the GEMMs
#: (i11 3x3 C=M=64 B=64 7.8 vs 0.785 ms; tuned-vs-default 16->8 B=64 0.351 vs
#: register_tiled 0.107 ms). A stride spreads its input patch (the crossover
#: log's strided problems went to fused_gemm, im2col or direct).
TILED_SHARED_MOST = 32

#: Taps (KH*KW) from which ``tiled_shared`` takes a small layer: its threads do
#: KH*KW multiply-adds per input channel between two barriers, and every layer
#: it won had 25 or 49 (the lines above). On a 3x3 it lost at every batch
#: measured: tf32x3-image-small, 3x3 C16->32 32x32 at batches 1-8, 0.031-0.061 ms
#: against fused_gemm's 0.028-0.030 (x1.11-x2.03).
TILED_SHARED_LEAST_TAPS = 25


#: Input x output channel pairs (per group) up to which a stride-1 1-D layer takes ``blocked``, the
#: kernel of one long signal: it walks each (input, output) channel pair's signal with one thread
#: per outputs, so the work per output grows with the pairs while the implicit GEMMs tile them
#: (speech layers of 256-1024 channels ran 0.08-0.37x cuDNN on it). Measured on 1 to 8 x 8.
BLOCKED_MOST_PAIRS = 64


#: Input channels (per group) up to which a layer's backward is a first layer's (a stem: an image's
#: planes in): its weight gradient reduces over B*Ho*Wo for a handful of columns. Four channels is
#: not one: ECE408 fa21 conv2 (4->16 7x7) kept tf32x3's backward (1.41 ms against 1.91-2.59).
STEM_MOST_CHANNELS = 3


def big_tiles(s: ConvSpec) -> int:
    """Block tiles of igemm_big over the forward output (B*Ho*Wo columns, M/g rows per group)."""
    rows = 64 if s.out_channels_per_group <= 64 else 128
    n = s.batch * s.out_size[0] * s.out_size[1]
    return -(-n // 128) * -(-s.out_channels_per_group // rows) * s.groups


def _image_rounds(s: ConvSpec) -> int:
    """Rounds of its warps tf32x3_image's block takes over one image (tf32x3_image_geometry's arithmetic)."""
    return math.ceil(math.ceil(math.prod(s.out_size) / 32) / TF32X3_IMAGE_MAX_WARPS)


def _is_pointwise(spec: ConvSpec) -> bool:
    """1x1 kernel, stride 1, no padding: the layer is a GEMM of x (the pointwise kernels' class)."""
    return (
        all(k == 1 for k in spec.kernel_size)
        and all(st == 1 for st in spec.stride)
        and not any(lo or hi for lo, hi in spec.padding)
    )


def _pointwise_class(s: ConvSpec, tiles: int) -> list[tuple[str, str]]:
    """Forward 1x1 stride-1 layers: by the reduction length C/g, then the work."""
    cg = s.channels_per_group
    rules = []
    if cg >= SPLITK_FROM and s.dtype == "float32" and splitk_tiles(s) <= SPLITK_MOST_TILES:
        rules.append(
            (
                "pointwise_splitk",
                f"1x1, {cg} input channels per group on {splitk_tiles(s)} 32x32 tiles: "
                "the reduction split across blocks fills the GPU",
            )
        )
    if cg >= SPLITK_FROM and 2 * s.out_channels_per_group > TF32X3_FROM and not rules:
        # zoo-gpu-2026-11-28-h200, batch 32: on 14 of 16 1x1 layers with too much work for the split
        # reduction (192-2048 input channels, 7x7 to 112x112 and 1-D), tf32x3 was the fastest: 1.06-1.84x
        # cuDNN where the old picks ran 0.42-1.32x (igemm_big, cuBLAS, pointwise); the other two were
        # 7x7 images with 1024+ output channels, where igemm_big led it by 1.24x. Its 64-row tile
        # must be more than half used, as on the 3x3 layers (TF32X3_FROM): the 14 had 48 to 1024 outputs.
        rules.append(
            (
                "tf32x3",
                f"1x1, {cg} input channels per group on {splitk_tiles(s)} 32x32 tiles, too many to split: "
                "tensor cores, error-compensated TF32",
            )
        )
    if cg <= POINTWISE_MOST:
        channels = f"{cg} input channel{'s' if cg > 1 else ''} per group"
        return rules + [("pointwise", f"1x1, {channels}: a short per-thread reduction, one pass over x")]
    if tiles >= BIG_ENOUGH:
        rules.append(("igemm_big", f"1x1 with {tiles} big block tiles of work: the pipelined implicit GEMM"))
    if cg >= POINTWISE_GEMM_FROM:
        rules.append(
            ("pointwise_gemm", f"1x1, {cg} input channels per group on {tiles} tiles: cuBLAS splits the long reduction")
        )
    rules.append(("fused_gemm", f"1x1, {cg} input channels per group: 64x64 implicit GEMM, 16 channels a step"))
    return rules


def _forward_rules(spec: ConvSpec, s: ConvSpec, tiles: int) -> list[tuple[str, str]]:
    """The forward classes, first match first (a 1-D case blocked declines falls through to the 2-D ones)."""
    rules = []
    if spec.ndim == 1 and spec.stride == (1,) and s.channels_per_group * s.out_channels_per_group <= BLOCKED_MOST_PAIRS:
        # i11 and targets-1121: blocked 4-9x the other 1-D kernels on 10^7-10^9 samples;
        # within x1.24 of the fastest on regret-gpu.md's 21 us signals.
        rules.append(("blocked", "1-D, stride 1, few channels: register-blocked kernel, bound by memory bandwidth"))
    if _is_pointwise(s):
        return rules + _pointwise_class(s, tiles)
    cg, mg = s.channels_per_group, s.out_channels_per_group
    if spec.is_depthwise:
        # i11: depthwise 0.076 ms vs 0.158 for the next (3x3 s2 C144 B=64), 0.035 vs 0.089 (C384 14x14);
        # regret-gpu.md: fastest or within x1.30 at batch 1 (launch-bound, 20-30 us).
        rules.append(("depthwise", "one input channel per group: bandwidth-bound kernel reading each input once"))
    if (
        s.groups == 1
        and cg >= TF32X3_IMAGE_FROM
        and mg <= TF32X3_IMAGE_MAX_CHANNELS
        and s.stride == (1, 1)
        and s.dilation == (1, 1)
        and math.prod(s.kernel_size) > 1  # a padded 1x1 (not the pointwise class) was not measured
        and math.ceil(math.prod(s.out_size) / 32) <= TF32X3_IMAGE_MOST_PAIRS
        and (_image_rounds(s) == 1 or s.batch >= TF32X3_IMAGE_MULTI_ROUND_BATCH)
    ):
        rules.append(("tf32x3_image", f"{cg}->{mg} channels, stride 1: one image in shared memory, tensor cores"))
    if mg <= REGISTER_TILED_MOST and math.prod(s.kernel_size) > 1:
        blocks = register_tiled_blocks(s)
        several = cg > 1 and s.stride == (1, 1)  # the class REGISTER_TILED_SEVERAL_CHANNELS_BLOCKS was measured on
        if blocks >= (REGISTER_TILED_SEVERAL_CHANNELS_BLOCKS if several else REGISTER_TILED_BLOCKS):
            rules.append(("register_tiled", f"{mg} output channels per group fit one register tile; {blocks} blocks"))
    if cg == 1:
        # A first layer (one input channel, several filters) is the depthwise kernel's case too: fastest at
        # batch 8 (regret-gpu.md fa19 conv1 27 us, fa21 conv1 20 us; register_tiled x1.26), on the crossover
        # log's B4 C1 M32 28x28 k3 and B16 C1 M256 56x56 k3 (not on its B1 C1 M256 k5: fused_gemm, margin
        # unknown); where register_tiled fills the GPU it loses only x1.05-1.38 to it (sweep-h100, ECE408
        # conv1 at batch 10,000).
        rules.append(("depthwise", "one input channel: bandwidth-bound kernel reading each input once"))
    if (
        s.stride == (1, 1)
        and cg <= TILED_SHARED_MOST
        and mg <= TILED_SHARED_MOST
        and tiles < BIG_ENOUGH
        and math.prod(s.kernel_size) >= TILED_SHARED_LEAST_TAPS
    ):
        rules.append(("tiled_shared", f"small stride-1 layer ({cg}->{mg} channels per group): one thread per output"))
    return rules + _gemm_rules(spec, s, tiles, "forward")


def _gemm_rules(spec: ConvSpec, s: ConvSpec, tiles: int, direction: str) -> list[tuple[str, str]]:
    """The implicit GEMMs: tf32x3, then igemm_big with enough work, else fused_gemm.

    1x1 stride-1 layers have their own forward class. Backward,
    ``_backward_rules`` has already put tf32x3 first from
    TF32X3_BACKWARD_TILES tiles; these lines serve the rest (and float64,
    which tf32x3 declines): a backward pass below those tiles was not
    measured on tf32x3, so it keeps the SIMT GEMMs.
    """
    rules = []
    mg = s.out_channels_per_group
    few_tiles_ok = direction == "forward" and s.stride == (1, 1)
    if mg >= TF32X3_FROM and not _is_pointwise(s) and (tiles >= BIG_ENOUGH or few_tiles_ok):
        # Fewer tiles than BIG_ENOUGH: zoo-gpu-2026-11-28-h200, batch 1 (13 to 100 tiles), stride-1 layers
        # with 64+ output channels ran 1.4-2.1x faster on tf32x3 than on fused_gemm (3x3 64->64 56x56,
        # 128->192 28x28, 1-D K=7/11 at 128 channels, K=2 at 128); the two strided ones measured there
        # (4x4 s4, 1x1 s2) stayed faster on fused_gemm (x1.2-1.3).
        rules.append(
            ("tf32x3", f"{tiles} block tiles, {mg} output channels per group: tensor cores, error-compensated TF32")
        )
    if tiles >= BIG_ENOUGH:
        rules.append(("igemm_big", f"{tiles} big block tiles of work: the pipelined 8x8-per-thread implicit GEMM"))
    rules.append(("fused_gemm", f"implicit GEMM over a reduction of {spec.reduction_length}, no im2col buffer"))
    return rules


def _backward_rules(spec: ConvSpec, tiles: int) -> list[tuple[str, str]]:
    """The backward classes, first match first.

    No 1x1 line: cuBLAS (``pointwise_gemm``: two GEMMs, a batched product
    and a sum) lost x2.26 to fused_gemm on 1x1 C64->128 14x14 B=4
    (regret-gpu.md) and tied igemm_big on 128->256 28x28 B=64 (i11: 0.491 vs
    0.497 ms), which the big-tile line already beats.
    """
    rules = []
    if spec.is_depthwise:
        # i11: depthwise backward 0.526 ms vs fused_gemm 10.8 (3x3 s2 C144 B=64); regret-gpu.md x1.01 at B=4.
        rules.append(("depthwise", "one input channel per group: gather dX, per-channel dW"))
    s = spec.as_2d()
    if s.groups == 1 and (
        s.channels_per_group <= STEM_MOST_CHANNELS
        or (s.stride == s.kernel_size and min(s.stride) > 1 and s.dilation == (1, 1) and not any(map(any, s.padding)))
    ):
        # zoo-gpu-2026-11-28-h200 (batch 32 backward): on the four stems (3 channels in) im2col_gemm took
        # 0.67-1.67 ms where the implicit GEMMs' split-K dW took 2.7-19.8 ms (x2.9-x29), and on ConvNeXt's
        # 2x2 stride-2 downsampling (patches that do not overlap, so im2col is a reshape) x2.5 less.
        rules.append(
            (
                "im2col_gemm",
                "backward of a first layer or of non-overlapping patches: the weight gradient is one long, "
                "thin GEMM over every output pixel, which cuBLAS splits",
            )
        )
    if spec.ndim == 1 and spec.stride != (1,):
        # zoo-gpu-2026-11-28-h200 (batch 32 backward): 1-D k3 stride 2 at 512 channels, im2col_gemm 3.0-3.2x
        # faster than tf32x3 (the im2col of a strided signal is short, and cuBLAS takes both products).
        rules.append(("im2col_gemm", "backward of a strided 1-D layer: im2col of the signal, both products on cuBLAS"))
    if tiles >= TF32X3_BACKWARD_TILES:
        # backward-2026-11-26 (kernel sums): tf32x3's dW on row tiles that fit the channels (16, 32, 64)
        # made it the fastest backward at 16 output channels too (ECE408 fa21 conv2 B=1000 1.41 ms vs
        # igemm_big 2.59, wgrad_padded 1.91), and at 64 (3x3 C=64 B=64 0.89 vs 1.55; C32->64 0.97 vs
        # 1.44); its table: 1x1 128->256 B=64 0.345 vs igemm_big 0.446 ms (i11: 0.395 vs 0.493).
        rules.append(("tf32x3", f"backward with {tiles} big block tiles: tensor-core dW on tiles that fit the rows"))
    return rules + _gemm_rules(spec, spec.as_2d(), tiles, "backward")


def choose(spec: ConvSpec, direction: str, can_run: Callable[[ConvSpec, str, str], Verdict]) -> tuple[str, str]:
    """The algorithm of the first class rule that applies and ``can_run``, with its reason.

    Parameters
    ----------
    spec : ConvSpec
        The validated problem.
    direction : {"forward", "backward"}
        Which pass.
    can_run : callable
        ``can_run(spec, algorithm, direction)``: the backend's verdict
        (``True`` or why not); a rule whose algorithm declines is skipped.

    Returns
    -------
    name, reason : str
        The algorithm and a sentence saying which class decided.
    """
    s = spec.as_2d()
    tiles = big_tiles(s)
    rules = _forward_rules(spec, s, tiles) if direction == "forward" else _backward_rules(spec, tiles)
    rules.append(("im2col_gemm", "fallback: im2col + cuBLAS"))
    for name, why in rules:
        if can_run(spec, name, direction) is True:
            return name, why
    return "direct", "fallback: one thread per output"
