"""The ECE408 course's LeNet-5 inference at batch 10,000: accuracy, Op Time, Layer Time, vs cuDNN.

``python -m convsuite.bench.ece408 --device gpu``:

1. trains the ECE408 FA21 LeNet-5 variant (86x86 input, conv 1->4 7x7,
   pool, conv 4->16 7x7, pool, fc, fc(10)) on scikit-learn's digits with
   ``--train-backend`` (default: cupy on the GPU, numba on the CPU), and
   reports its held-out test accuracy (this is also the training accuracy
   figure of that backend);
2. builds the inference batch from held-out images only: the test split
   as is, then copies shifted by up to ``--shift`` pixels (zero fill, a
   fixed seed) until there are ``--images`` of them (10,000 by default,
   the course's batch), so accuracy is measured on images the network
   never saw;
3. runs one pass of the whole batch through convsuite (``--backend``;
   every convolution layer goes through ``cs.conv2d``) and reports the
   course's figures (:func:`convsuite.nets.ece408_times`): "Op Time" (the
   convolution kernels alone), "Layer Time" (the convolution layers through
   the public API) and the accuracy;
4. times the whole network, convsuite against the same network and weights
   in torch (cuDNN on the GPU, TF32 off, ``cudnn.benchmark`` on; torch
   eager on the CPU), side by side with the measuring core (warm-up,
   interleaved repeats, medians and spread; CUDA events on the GPU), after
   checking that both give the same predictions.

The course's baseline, for scale (its own GPU, not this one): about 170 ms
of Op Time for both convolutions of the FA21 network at batch 10,000.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

__all__ = ["inference_batch", "main", "run"]

COURSE_OP_TIME_S = 0.170  # the course's baseline Op Time, both convolutions, batch 10,000 (its GPU)


def inference_batch(x_test: np.ndarray, y_test: np.ndarray, images: int, *, shift: int = 2, seed: int = 0):
    """``images`` held-out images: the test split, then shifted copies (zero fill), and their labels."""
    if images < 1:
        raise ValueError(f"`images` must be a positive integer; got {images!r}")
    rng = np.random.default_rng(seed)
    n = len(x_test)
    index = np.arange(images) % n
    x = x_test[index].copy()
    for i in range(n, images):  # the first pass over the split is unshifted
        dy, dx = rng.integers(-shift, shift + 1, size=2)
        x[i] = _shifted(x_test[index[i]], int(dy), int(dx))
    return x, y_test[index]


def _shifted(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``image`` (C, H, W) moved by (dy, dx) pixels, zeros where it left."""
    out = np.zeros_like(image)
    H, W = image.shape[-2:]
    out[:, max(dy, 0) : H + min(dy, 0), max(dx, 0) : W + min(dx, 0)] = image[
        :, max(-dy, 0) : H + min(-dy, 0), max(-dx, 0) : W + min(-dx, 0)
    ]
    return out


def run(
    *,
    device: str = "gpu",
    backend: str | None = None,
    train_backend: str | None = None,
    images: int = 10_000,
    epochs: int = 10,
    shift: int = 2,
    repeat: int = 10,
    rounds: int = 5,
) -> dict:
    """Train, build the batch, measure; the figures as a dict (see the module docstring)."""
    from .. import nets, nn
    from .._timing import Contender, measure_side_by_side
    from ..nets.data import load_digits_split
    from ..nets.lenet import LENET5_VARIANTS
    from ..nets.train import TrainConfig, train_lenet5
    from .machine import cpu_description, gpu_description
    from .torch_nets import to_torch

    variant = "ece408-fa21"
    default_backend = "cupy" if device == "gpu" else "numba"
    train_backend = train_backend or default_backend
    backend = backend or default_backend
    trained = train_lenet5(TrainConfig(variant=variant, backend=train_backend, epochs=epochs, device=device))
    data = load_digits_split(LENET5_VARIANTS[variant])
    x, labels = inference_batch(data.x_test, data.y_test, images, shift=shift)

    network = nets.lenet5(variant, backend=backend)
    network.load_state_dict({k: nn._xp.to_numpy(v) for k, v in trained.network.state_dict().items()})
    network.eval()
    if device == "gpu":
        import cupy as cp

        network.to("gpu")
        x_dev = cp.asarray(x)
    else:
        x_dev = x
    course = nets.ece408_times(network, x_dev, labels)

    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    reference = to_torch(network).eval()
    if device == "gpu":
        reference = reference.cuda()
        x_torch = torch.as_tensor(x, device="cuda")
    else:
        x_torch = torch.as_tensor(x)
    with torch.no_grad(), nn.no_grad():
        ours = nn._xp.to_numpy(network(x_dev))
        theirs = reference(x_torch).cpu().numpy()
    agree = float((ours.argmax(1) == theirs.argmax(1)).mean())
    torch_accuracy = float((theirs.argmax(1) == labels).mean())
    max_rel = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))

    from .._registry import get_backend

    timer = get_backend("cupy").timer if device == "gpu" else get_backend("numpy").timer

    def ours_call():
        with nn.no_grad():
            network(x_dev)

    def torch_call():
        with torch.no_grad():
            reference(x_torch)

    timings = measure_side_by_side(
        {"convsuite": Contender(ours_call, timer), "torch": Contender(torch_call, timer)},
        repeat=repeat,
        rounds=rounds,
        warmup=1,
    )
    return {
        "machine": gpu_description() if device == "gpu" else cpu_description(),
        "variant": variant,
        "images": images,
        "backend": backend,
        "train_backend": train_backend,
        "train_epochs": epochs,
        "train_test_accuracy": trained.test_accuracy,
        "accuracy": course["accuracy"],
        "torch_accuracy": torch_accuracy,
        "prediction_agreement": agree,
        "max_rel_logit_difference": max_rel,
        "op_time_s": course["op_time_s"],
        "layer_time_s": course["layer_time_s"],
        "total_op_time_s": course["total_op_time_s"],
        "total_layer_time_s": course["total_layer_time_s"],
        "course_op_time_s": COURSE_OP_TIME_S,
        "whole_network": {
            name: {"median_s": t.median, "low_s": t.low, "high_s": t.high, "iqr_rel": t.iqr_rel, "repeats": t.repeats}
            for name, t in timings.items()
        },
    }


def _table(r: dict) -> str:
    """The printed summary."""
    ours, theirs = r["whole_network"]["convsuite"], r["whole_network"]["torch"]
    ref = "cuDNN (torch, TF32 off)" if "cupy" in r["backend"] else "torch eager"
    lines = [
        f"ECE408 FA21 LeNet-5, {r['images']} held-out images, {r['machine']}",
        f"trained with {r['train_backend']} ({r['train_epochs']} epochs): test accuracy {r['train_test_accuracy']:.2%}",
        f"inference with {r['backend']}: accuracy {r['accuracy']:.2%} (torch, same weights: {r['torch_accuracy']:.2%}; "
        f"predictions agree on {r['prediction_agreement']:.2%}, max rel. logit difference "
        f"{r['max_rel_logit_difference']:.1e})",
        "Op Time per conv layer: "
        + ", ".join(f"{s * 1e3:.2f} ms" for s in r["op_time_s"])
        + f"; total {r['total_op_time_s'] * 1e3:.2f} ms (the course's baseline: {r['course_op_time_s'] * 1e3:.0f} ms "
        "on its GPU)",
        "Layer Time per conv layer: "
        + ", ".join(f"{s * 1e3:.2f} ms" for s in r["layer_time_s"])
        + f"; total {r['total_layer_time_s'] * 1e3:.2f} ms",
        f"whole network, median of {ours['repeats']} (min-max): convsuite {ours['median_s'] * 1e3:.2f} ms "
        f"({ours['low_s'] * 1e3:.2f}-{ours['high_s'] * 1e3:.2f}), {ref} {theirs['median_s'] * 1e3:.2f} ms "
        f"({theirs['low_s'] * 1e3:.2f}-{theirs['high_s'] * 1e3:.2f}); ratio torch/convsuite "
        f"{theirs['median_s'] / ours['median_s']:.2f}x (> 1: convsuite faster)",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command line: train, measure, print the table, write JSON with ``--out``."""
    import sys

    from ._arguments import backend_name, gpu_unavailable, out_file

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.ece408", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "gpu"),
        default=None,
        help="where to run (default gpu, or cpu when the GPU backend is unavailable)",
    )
    parser.add_argument(
        "--backend",
        type=backend_name,
        default=None,
        help="inference backend (default cupy on the GPU, numba on the CPU)",
    )
    parser.add_argument(
        "--train-backend", type=backend_name, default=None, help="training backend (default as --backend)"
    )
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", type=out_file, default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    for name in ("images", "epochs", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a positive integer; got {getattr(args, name)}")
    why = gpu_unavailable()
    if args.device is None:
        args.device = "gpu" if why is None else "cpu"
        if why is not None:
            print(f"no --device: running on the cpu (the GPU backend is unavailable: {why})", file=sys.stderr)
    elif args.device == "gpu" and why is not None:
        parser.error(f"--device gpu needs the GPU backend (cupy), which is unavailable here: {why}")
    from .. import get_backend

    for option, name in (("--backend", args.backend), ("--train-backend", args.train_backend)):
        if name is None:
            continue
        info = get_backend(name)
        verdict = info.available()
        if verdict is not True:
            parser.error(f"{option}: {name!r} is unavailable here: {verdict}")
        if info.device != args.device:
            parser.error(f"{option}: {name!r} is a {info.device} backend, not a {args.device} one (see --device)")
    result = run(
        device=args.device,
        backend=args.backend,
        train_backend=args.train_backend,
        images=args.images,
        epochs=args.epochs,
        repeat=args.repeat,
        rounds=min(5, args.repeat),
    )
    print(_table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
