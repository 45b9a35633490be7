"""MobileNetV2 batch 1 on the GPU: where the time goes (issue 13's graph target).

Prints, on the device machine:

1. the whole network (BN folded): the ``CapturedNetwork`` call, its graph
   replay alone, the host time of one call, eager, and torch (eager, own graph);
2. every convolution layer replayed from a CUDA graph of 20 back-to-back
   calls (pure GPU time per call, no Python) for the rule's pick and every
   other cupy algorithm that runs it, next to cuDNN (torch, TF32 off) in its
   own graph; the sums per layer class.

CUDA events, medians of interleaved repeats.
"""

# ruff: noqa: B023  (every lambda below is called, captured or timed within its loop iteration)
from __future__ import annotations

import statistics
import sys
import time

import cupy
import numpy as np
import torch

import convsuite as cs
import convsuite.nn.conv as nn_conv
from convsuite import nets, nn
from convsuite._capture import graph_capture
from convsuite.bench.torch_nets import to_torch

REPEAT = 20


def events_median(fn, repeat=30, warmup=3):
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
    return statistics.median(times), min(times), max(times)


def cupy_graph(fn):
    """A cupy graph of REPEAT calls of fn (after two warm-up calls), and its stream."""
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream, graph_capture():
        fn()
        fn()
        stream.synchronize()
        stream.begin_capture()
        for _ in range(REPEAT):
            fn()
        graph = stream.end_capture()
    return graph, stream


def torch_graph(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.inference_mode():
        for _ in range(REPEAT):
            fn()
    return g


def layer_class(w_shape, groups, stride):
    M, Cg, KH, KW = w_shape
    if KH == 1:
        return "pointwise"
    if groups > 1:
        return f"depthwise s{stride[0]}"
    return "stem"


def main() -> int:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    x_host = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    x = cupy.asarray(x_host)
    built = nets.mobilenet_v2(backend="cupy", seed=0).eval()
    folded = nn.fold_batchnorms(built)
    model = to_torch(built).eval().cuda()
    tx = torch.from_numpy(x_host).cuda()
    folded.to("gpu")
    graph = nn.CapturedNetwork(folded)
    graph(x)
    entry = next(iter(graph._graphs.values()))

    def replay_only():
        entry.graph.launch(stream=cupy.cuda.get_current_stream())

    def eager():
        with nn.no_grad():
            folded(x)

    def torch_eager():
        with torch.inference_mode():
            model(tx)

    tg = torch_graph(lambda: model(tx))
    whole = {}
    for _ in range(3):  # interleaved rounds
        for name, fn in (
            ("CapturedNetwork call", lambda: graph(x)),
            ("graph replay only", replay_only),
            ("cupy eager (BN folded)", eager),
            ("torch eager", torch_eager),
            ("torch graph x20 / 20", tg.replay),
        ):
            whole.setdefault(name, []).append(events_median(fn, repeat=20)[0])
    host = []
    for _ in range(50):
        t = time.perf_counter()
        graph(x)
        host.append(time.perf_counter() - t)
        cupy.cuda.get_current_stream().synchronize()
    print(f"device: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print("whole network, batch 1, BN folded (ms, median of 3 rounds of 20)")
    for name, ts in whole.items():
        scale = 1 / REPEAT if "x20" in name else 1
        rounds = [round(t * 1e3 * scale, 3) for t in ts]
        print(f"  {name:<28} {statistics.median(ts) * 1e3 * scale:8.3f}   rounds {rounds}")
    print(f"  host time of one CapturedNetwork call (no sync): {statistics.median(host) * 1e6:.0f} us")

    # ---- per convolution layer
    calls = []
    original = nn_conv._api.conv2d

    def record(xx, w, b=None, **kw):
        calls.append((xx, w, b, kw))
        return original(xx, w, b, **kw)

    nn_conv._api.conv2d = record
    try:
        with nn.no_grad():
            folded(x)
    finally:
        nn_conv._api.conv2d = original
    seen = {}
    for xx, w, b, kw in calls:
        key = (tuple(xx.shape), tuple(w.shape), kw["stride"], kw["padding"], kw["groups"], kw.get("activation"))
        seen.setdefault(key, [xx, w, b, kw, 0])[4] += 1
    algorithms = cs.get_backend("cupy").algorithms
    rows, totals = [], {}
    for xx, w, b, kw, count in seen.values():
        kw = dict(kw)
        kw.pop("backend", None)
        kw.pop("algorithm", None)
        act = kw.pop("activation", None)
        pick = cs.explain(xx, w, b, backend="cupy", **kw).algorithm
        times = {}
        for algo in algorithms:
            try:
                g, s = cupy_graph(lambda: cs.conv2d(xx, w, b, backend="cupy", algorithm=algo, activation=act, **kw))
            except Exception:
                continue
            times[algo] = events_median(lambda: g.launch(stream=cupy.cuda.get_current_stream()), repeat=15)[0] / REPEAT
        tw = torch.as_tensor(w, device="cuda")
        tb = None if b is None else torch.as_tensor(b, device="cuda")
        txx = torch.as_tensor(xx, device="cuda")
        pad = kw["padding"]
        pads = tuple(p[0] for p in pad) if isinstance(pad[0], tuple) else pad
        tg1 = torch_graph(
            lambda: torch.nn.functional.conv2d(txx, tw, tb, stride=kw["stride"], padding=pads, groups=kw["groups"])
        )
        cudnn = events_median(tg1.replay, repeat=15)[0] / REPEAT
        best = min(times, key=times.get)
        cls = layer_class(tuple(w.shape), kw["groups"], kw["stride"])
        t = totals.setdefault(cls, [0.0, 0.0, 0.0, 0])
        t[0] += count * times.get(pick, times[best])  # a pick refused under capture: the graph runs another
        t[1] += count * times[best]
        t[2] += count * cudnn
        t[3] += count
        rows.append((cls, tuple(xx.shape), tuple(w.shape), count, pick, times.get(pick), best, times[best], cudnn))
    print("\nper layer, GPU time per call from a graph of 20 calls (us)")
    print(f"{'class':<13} {'x':<20} {'w':<18} {'n':>2} {'pick':<15} {'us':>7} {'best':<15} {'us':>7} {'cuDNN':>7}")
    for cls, xs, ws, n, pick, tp, best, tb_, tc in rows:
        # The eager pick may be one CuPy refuses under capture (cuBLAS): no graph time for it.
        picked = "  (n/a)" if tp is None else f"{tp * 1e6:7.1f}"
        shapes = f"{cls:<13} {str(xs):<20} {str(ws):<18} {n:>2}"
        print(f"{shapes} {pick:<15} {picked} {best:<15} {tb_ * 1e6:7.1f} {tc * 1e6:7.1f}")
    print("\nsums per class (us): pick, best, cuDNN, layers")
    for cls, (tp, tb_, tc, n) in totals.items():
        print(f"  {cls:<13} {tp * 1e6:8.1f} {tb_ * 1e6:8.1f} {tc * 1e6:8.1f} {n:>3}")
    allp = sum(v[0] for v in totals.values())
    allb = sum(v[1] for v in totals.values())
    allc = sum(v[2] for v in totals.values())
    print(f"  {'all convs':<13} {allp * 1e6:8.1f} {allb * 1e6:8.1f} {allc * 1e6:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
