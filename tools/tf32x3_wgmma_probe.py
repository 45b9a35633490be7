"""Probe (device tool, sm_90): tf32x3's forward on wgmma against tf32x3 on mma.sync and cuDNN-FP32,
through the public API, in one process.

    python3 tools/tf32x3_wgmma_probe.py [--repeat 21] [--layers "cnn c2,..."]

Per layer of tools/tf32x3_ab.py: a plan of ``algorithm="tf32x3"`` with ``params={"mma":
"wgmma"}`` and ``{"mma": "sync"}`` (``cs.plan``), each plain and with the fused ReLU (the plan
``cs.conv2d(..., activation="relu")`` builds, through its private builder: ``cs.plan`` takes no
activation), and cuDNN (TF32 off,
``cudnn.benchmark``) plain and followed by a ReLU; CUDA events around each call, interleaved rounds
after a warm-up; medians (min-max). The last column checks both kernels' first two images against
the float64 reference (worst error over the float32 tolerance: < 1 passes).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import cupy as cp
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from tf32x3_ab import LAYERS, layer_operands, reference, worst_error  # noqa: E402

import convsuite as cs  # noqa: E402
from convsuite._api import _planned  # noqa: E402
from convsuite.bench.backward_ladder import _interleaved  # noqa: E402

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True

MMAS = ("wgmma", "sync")


def _fused_relu_plan(x, w, b, params, kw):
    """The plan ``cs.conv2d(x, w, b, activation="relu", ...)`` runs, with ``params`` pinned."""
    geometry = [kw.get(k, d) for k, d in (("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1))]
    return _planned(2, "forward", x, w, b, *geometry, "cupy", "tf32x3", activation="relu", params=params)


def layer_row(layer, rs, repeat: int) -> str:
    """One table row: every contender on ``layer``, interleaved, and the kernels' worst error."""
    name, B = layer[:2]
    x, w, b, kw = layer_operands(rs, layer)
    tx, tw, tb = (torch.from_dlpack(a) for a in (x, w, b))
    ref, tol = reference(x, w, b, kw)
    calls, errors = {}, []
    for mma in MMAS:
        params = {"mma": mma}
        head = cs.plan(x[:2], w, b, backend="cupy", algorithm="tf32x3", params=params, **kw)(x[:2], w, b)
        errors.append(worst_error(head, ref, tol))
        plain = cs.plan(x, w, b, backend="cupy", algorithm="tf32x3", params=params, **kw)
        fused = _fused_relu_plan(x, w, b, params, kw)
        calls[mma] = lambda p=plain: p(x, w, b)
        calls[f"{mma}+relu"] = lambda p=fused: p(x, w, b)
    calls["cudnn"] = lambda: torch.nn.functional.conv2d(tx, tw, tb, **kw)
    calls["cudnn+relu"] = lambda: torch.relu_(torch.nn.functional.conv2d(tx, tw, tb, **kw))
    t = _interleaved(calls, repeat)
    med = {k: v[0] * 1e3 for k, v in t.items()}
    cells = [f"{med[k]:.3f} ({t[k][1] * 1e3:.3f}-{t[k][2] * 1e3:.3f})" for k in ("wgmma", "sync", "cudnn")]
    return (
        f"| {name} B={B} | " + " | ".join(cells) + f" | {med['cudnn'] / med['wgmma']:.3f} | "
        f"{med['cudnn'] / med['sync']:.3f} | {med['sync'] / med['wgmma']:.3f} | "
        f"{med['cudnn+relu'] / med['wgmma+relu']:.3f} | {med['cudnn+relu'] / med['sync+relu']:.3f} | "
        f"{max(errors):.3f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--layers", default="", help="comma-separated layer names (default: all)")
    args = parser.parse_args()
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {device}; convsuite from {cs.__file__}", flush=True)
    print(
        "| layer | wgmma ms | sync ms | cudnn ms | cudnn / wgmma | cudnn / sync | sync / wgmma "
        "| cudnn+relu / wgmma+relu | cudnn+relu / sync+relu | err/tol |"
    )
    print("|---" * 10 + "|")
    rs = cp.random.RandomState(11)
    wanted = [n.strip() for n in args.layers.split(",") if n.strip()]
    for layer in LAYERS:
        if wanted and layer[0] not in wanted:
            continue
        print(layer_row(layer, rs, args.repeat), flush=True)
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
