"""MobileNetV2 batch 1 on the GPU: ReLU6 fused into the convolutions' epilogues, or run as its own layers.

Prints, on the device machine, the whole network (BN folded, device-resident
input) eager and as a ``CapturedNetwork``, each with ``Sequential``'s
activation fusion on and off, next to torch eager and torch's own CUDA graph
(cuDNN, TF32 off), in interleaved rounds: CUDA-event medians per round, the
median of the rounds, the spread. Then the logits of every contender against
torch's (relative error), and the kernel launches of one eager pass.
"""

# ruff: noqa: B023  (every lambda below is called or timed within its loop iteration)
from __future__ import annotations

import argparse
import statistics

import cupy
import numpy as np
import torch

from convsuite import nets, nn
from convsuite.bench.torch_nets import to_torch

GRAPH_CALLS = 20


def events_median(fn, repeat: int, warmup: int = 3) -> float:
    """Median seconds of ``fn`` between two CUDA events (the host's time counts while the GPU waits)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    return statistics.median(times)


def set_fusion(network: nn.Module, on: bool) -> None:
    """Turn ``Sequential``'s activation fusion on or off in every Sequential of ``network``."""
    for _, module in network.named_modules():
        if isinstance(module, nn.Sequential):
            object.__setattr__(module, "fuse_activations", on)


def torch_graph(model, tx):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        model(tx)
        model(tx)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        for _ in range(GRAPH_CALLS):
            model(tx)
    return graph


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per contender and round (default 20)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    x_host = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    x = cupy.asarray(x_host)
    built = nets.mobilenet_v2(backend="cupy", seed=0).eval()
    model = to_torch(built).eval().cuda()
    tx = torch.from_numpy(x_host).cuda()
    folded = nn.fold_batchnorms(built)
    folded.to("gpu")
    captured = {}
    for on in (True, False):
        set_fusion(folded, on)
        captured[on] = nn.CapturedNetwork(folded)
        captured[on](x)  # captured with this fusion setting
    tg = torch_graph(model, tx)

    def eager(on):
        set_fusion(folded, on)
        with nn.no_grad():
            return folded(x)

    def torch_eager():
        with torch.inference_mode():
            return model(tx)

    contenders = {
        "eager, ReLU6 fused": lambda: eager(True),
        "eager, ReLU6 as layers": lambda: eager(False),
        "graph, ReLU6 fused": lambda: captured[True](x),
        "graph, ReLU6 as layers": lambda: captured[False](x),
        "torch eager": torch_eager,
        "torch graph (x20 / 20)": tg.replay,
    }
    rounds = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            t = events_median(fn, args.repeat)
            rounds[name].append(t / GRAPH_CALLS if "x20" in name else t)

    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, cupy {cupy.__version__}")
    print(f"MobileNetV2-1.0 batch 1, BN folded, float32; medians of {args.rounds} rounds of {args.repeat} calls (ms)")
    base = statistics.median(rounds["torch eager"])
    graph_base = statistics.median(rounds["torch graph (x20 / 20)"])
    print(
        f"{'contender':<26} {'median':>8} {'min-max of rounds':>20} {'torch eager / it':>17} {'torch graph / it':>17}"
    )
    for name, ts in rounds.items():
        med = statistics.median(ts)
        spread = f"{min(ts) * 1e3:.3f}-{max(ts) * 1e3:.3f}"
        print(f"{name:<26} {med * 1e3:8.3f} {spread:>20} {base / med:16.2f}x {graph_base / med:16.2f}x")
    fused_ratio = [u / f for f, u in zip(rounds["eager, ReLU6 fused"], rounds["eager, ReLU6 as layers"])]
    print(f"eager speed-up from the fusion, per round: {[round(r, 3) for r in fused_ratio]}")
    per_round = [t / f for f, t in zip(rounds["eager, ReLU6 fused"], rounds["torch eager"])]
    print(f"eager fused vs torch eager, per round: {[round(r, 3) for r in per_round]}")

    reference = torch_eager().double().cpu().numpy()
    scale = np.abs(reference).max()
    for name in ("eager, ReLU6 fused", "eager, ReLU6 as layers", "graph, ReLU6 fused", "graph, ReLU6 as layers"):
        got = cupy.asnumpy(contenders[name]()).astype(np.float64)
        print(f"logits {name:<24} max |diff| / max |torch| = {np.abs(got - reference).max() / scale:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
