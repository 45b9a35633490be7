"""tf32x3_image against the other forward algorithms and cuDNN over batch sizes (a GPU machine).

For the hand rule's batch threshold: tf32x3_image runs one image per block
iteration on persistent blocks, so a batch smaller than the blocks the GPU
holds leaves multiprocessors idle. Each layer at each batch: every cupy
algorithm the rule might pick for it (and tf32x3_image), kernel launches
alone, CUDA events, medians of interleaved rounds; cuDNN (torch, TF32 off,
cudnn.benchmark) on the same buffers. Prints a markdown table.

    python3 tools/tf32x3_image_batches.py [--repeat 9] [--batches 1,8,64]
"""

from __future__ import annotations

import argparse
import statistics

import convsuite as cs
from convsuite.bench.gpu_targets import Target, _interleaved, _torch_call

LAYERS = {
    "ECE408 fa19 conv2": ((12, 22, 22), (24, 12, 5, 5), {}),
    "ECE408 fa21 conv2": ((4, 40, 40), (16, 4, 7, 7), {}),
    "3x3 C16->32 32x32 pad1": ((16, 32, 32), (32, 16, 3, 3), dict(padding=1)),
    "5x5 C8->16 28x28 pad2": ((8, 28, 28), (16, 8, 5, 5), dict(padding=2)),
    "LeNet conv2": ((6, 14, 14), (16, 6, 5, 5), {}),
}
BATCHES = (16, 64, 132, 264, 1024, 4096)
CANDIDATES = ("tf32x3_image", "register_tiled", "tf32x3", "igemm_big", "fused_gemm", "tiled_shared", "depthwise")


def _measure(backend, label, x_shape, w_shape, kw, repeat):
    """Median seconds of cuDNN and of each candidate that can run the layer; the rule's pick."""
    import cupy as cp

    rng = cp.random.RandomState(x_shape[0])
    x = rng.standard_normal(x_shape, dtype=cp.float32)
    w = rng.standard_normal(w_shape, dtype=cp.float32)
    b = rng.standard_normal(w_shape[0], dtype=cp.float32)
    spec = cs.explain(x, w, b, **kw).spec
    contenders = {"cudnn": _torch_call(Target(label, x_shape, w_shape, kw), x, w, b, None)}
    out = cp.empty(spec.y_shape, cp.float32)
    for algorithm in CANDIDATES:
        if backend.can_run(spec, algorithm, "forward") is True:
            launch = backend.plan(spec, algorithm, "forward")
            contenders[algorithm] = lambda launch=launch: launch(x, w, b, out)
    samples = _interleaved(contenders, repeat)
    return {k: statistics.median(v) for k, v in samples.items()}, backend.choose_algorithm(spec, "forward")[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument(
        "--batches", default=",".join(map(str, BATCHES)), help="comma-separated batch sizes (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batches must be comma-separated positive integers; got {args.batches!r}")
    if not batches or min(batches) < 1:
        parser.error(f"--batches must be comma-separated positive integers; got {args.batches!r}")
    import cupy as cp
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    backend = cs._registry.get_backend("cupy")
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    print(
        f"device: {name.decode() if isinstance(name, bytes) else name}; kernel ms (x cuDNN), medians of {args.repeat}"
    )
    print("| layer | batch | rule picks | cuDNN ms | " + " | ".join(CANDIDATES) + " |")
    print("|---|---|---|---|" + "---|" * len(CANDIDATES))
    for label, (image, w_shape, kw) in LAYERS.items():
        for batch in batches:
            med, pick = _measure(backend, label, (batch, *image), w_shape, kw, args.repeat)
            cells = [f"{med[a] * 1e3:.3f} ({med['cudnn'] / med[a]:.2f}x)" if a in med else "-" for a in CANDIDATES]
            print(f"| {label} | {batch} | {pick} | {med['cudnn'] * 1e3:.3f} | " + " | ".join(cells) + " |", flush=True)
            cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
