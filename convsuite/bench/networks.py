"""Whole networks, convsuite vs PyTorch eager on the CPU: ``python -m convsuite.bench.networks``.

Prints, for this machine:

1. MobileNetV2-1.0 at batch 1 (224x224, the "robot finding kitten"
   network) in inference: the per-layer-type table (convolution, batch
   norm, activation, pooling, element-wise, ...) of each convsuite backend
   (as built, and with batch norms folded into the convolutions) next to
   torch eager's, measured with forward hooks, and the end-to-end time of
   each, timed side by side (alternating blocks, medians, min-max spread).
2. One LeNet-5 training step at batch 64 (forward, cross-entropy, backward,
   SGD with momentum) per backend vs torch eager, on real digits.
3. With ``--gpu``: MobileNetV2 batch 1 on the GPU (cupy eager, BN folded,
   ReLU6 fused or as layers, replayed from a CUDA graph) next to torch eager
   (cuDNN, TF32 off) and torch's own CUDA graph, CUDA events around each
   call, all contenders interleaved.
4. With ``--train``: the test accuracy of ``convsuite train``'s defaults on
   every CPU backend (minutes).

Every contender's output is compared with torch's before it is timed. The
figures are ratios of medians measured in one run on one machine (torch
uses ``--threads`` threads); ``--out FILE`` writes them as JSON too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timezone

import numpy as np

import convsuite

from .. import nets, nn
from .timing import time_side_by_side
from .torch_nets import to_torch, torch_category

__all__ = ["lenet_training_step", "main", "mobilenet_table"]


def _cpu_backends(requested: list[str] | None) -> list[str]:
    """Available CPU backends (the pure-Python one only if asked for: it takes minutes per pass)."""
    names = [b.name for b in convsuite.list_backends() if b.device == "cpu" and b.available]
    if requested:
        return [n for n in requested if n in names]
    return [n for n in names if n != "python"]


def _torch_layer_table(model, x, repeat: int) -> dict[str, float]:
    """Median seconds per layer category of a torch forward pass, via forward hooks."""
    import torch

    leaves = [m for m in model.modules() if not list(m.children())]
    samples: dict[str, list[float]] = {}
    starts: dict[int, float] = {}
    current: dict[str, float] = {}

    def before(module, inputs):
        starts[id(module)] = time.perf_counter()

    def after(module, inputs, output):
        category = torch_category(module)
        current[category] = current.get(category, 0.0) + time.perf_counter() - starts[id(module)]

    handles = [m.register_forward_pre_hook(before) for m in leaves]
    handles += [m.register_forward_hook(after) for m in leaves]
    try:
        with torch.inference_mode():
            model(x)
            for _ in range(repeat):
                current.clear()
                model(x)
                for category, seconds in current.items():
                    samples.setdefault(category, []).append(seconds)
    finally:
        for h in handles:
            h.remove()
    return {c: statistics.median(s) for c, s in samples.items()}


def _relative_error(got, expected) -> float:
    return float(np.abs(np.asarray(got) - expected).max() / np.abs(expected).max())


def mobilenet_table(backends: list[str], repeat: int = 10) -> dict:
    """MobileNetV2 batch 1 inference: per-layer-type tables and side-by-side end-to-end times.

    Returns a dict with ``end_to_end`` (name -> median, low, high seconds and
    ratio to torch), ``layer_types`` (name -> category -> seconds) and
    ``max_relative_error`` (name -> vs torch's logits).
    """
    import torch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    reference_net = nets.mobilenet_v2(seed=0).eval()
    model = to_torch(reference_net).eval()
    tx = torch.from_numpy(x)
    with torch.inference_mode():
        expected = model(tx).numpy()
    contenders, layer_types, errors, networks = {}, {}, {}, {}
    for name in backends:
        built = nets.mobilenet_v2(backend=name, seed=0).eval()
        for label, net in ((name, built), (f"{name} (BN folded)", nn.fold_batchnorms(built))):
            networks[label] = net
            with nn.no_grad():
                errors[label] = _relative_error(net(x), expected)

            def run(net=net):
                with nn.no_grad():
                    return net(x)

            contenders[label] = run

    def run_torch():
        with torch.inference_mode():
            return model(tx)

    contenders["torch eager"] = run_torch
    timings = time_side_by_side(contenders, repeat=repeat, warmup=1, rounds=min(repeat, 5))
    for label, net in networks.items():
        profile = nets.profile(net, x, repeat=max(3, repeat // 2), warmup=0)
        layer_types[label] = {c: e["seconds"] for c, e in profile.by_category().items()}
    layer_types["torch eager"] = _torch_layer_table(model, tx, max(3, repeat // 2))
    base = timings["torch eager"].median
    return {
        "end_to_end": {
            n: {
                "median_s": t.median,
                "low_s": t.low,
                "high_s": t.high,
                "first_call_s": t.first_call,
                "speedup_vs_torch": base / t.median,
            }
            for n, t in timings.items()
        },
        "layer_types": layer_types,
        "max_relative_error": errors,
    }


def lenet_training_step(backends: list[str], batch: int = 64, repeat: int = 10) -> dict:
    """One LeNet-5 SGD step at ``batch`` per backend vs torch eager, side by side."""
    import torch

    data = nets.data.load_digits_split(32, seed=0)
    x, y = data.x_train[:batch], data.y_train[:batch]
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    settings = dict(lr=0.01, momentum=0.9, weight_decay=1e-4)
    contenders, errors = {}, {}
    template = nets.lenet5(seed=0)
    model = to_torch(template)
    t_opt = torch.optim.SGD(model.parameters(), **settings)
    t_loss = torch.nn.CrossEntropyLoss()
    with torch.no_grad():
        expected = model(tx).numpy()

    for name in backends:
        net = nets.lenet5(backend=name, seed=0)
        criterion = nn.CrossEntropyLoss()
        optimiser = nn.SGD(net.parameters(), **settings)
        with nn.no_grad():
            errors[name] = _relative_error(net(x), expected)

        def step(net=net, criterion=criterion, optimiser=optimiser):
            optimiser.zero_grad()
            criterion(net(x), y)
            net.backward(criterion.backward(), input_grad=False)  # as torch: the images need none
            optimiser.step()

        contenders[name] = step

    def torch_step():
        t_opt.zero_grad()
        t_loss(model(tx), ty).backward()
        t_opt.step()

    contenders["torch eager"] = torch_step
    timings = time_side_by_side(contenders, repeat=repeat, warmup=1, rounds=min(repeat, 5))
    base = timings["torch eager"].median
    return {
        "batch": batch,
        "step": {
            n: {"median_s": t.median, "low_s": t.low, "high_s": t.high, "speedup_vs_torch": base / t.median}
            for n, t in timings.items()
        },
        "max_relative_error": errors,
    }


def _activations_as_layers(network: nn.Module) -> nn.Module:
    """``network`` with every ``Sequential``'s activation fusion off: each ReLU/ReLU6 its own layer."""
    for _, module in network.named_modules():
        if isinstance(module, nn.Sequential):
            object.__setattr__(module, "fuse_activations", False)
    return network


def gpu_mobilenet(repeat: int = 50) -> dict:
    """MobileNetV2 batch 1 on the GPU, device-resident input: cupy eager and CUDA graph, torch eager and graph.

    cupy runs as built, with its batch norms folded, and folded with each
    ReLU6 as its own layer instead of fused into the convolution before it
    (the epilogue's ablation), eagerly and replayed from a CUDA graph; torch
    runs cuDNN with TF32 off (``cudnn.benchmark`` on), eager and replaying its
    own CUDA graph, when torch has CUDA. Every contender is timed between the
    cupy backend's CUDA events, in interleaved blocks (``measure_side_by_side``:
    a slow spell of the host hits every contender alike); medians with the
    fastest and slowest call.
    """
    import cupy
    import torch

    from .._registry import get_backend
    from .._timing import Contender, measure_side_by_side

    x_host = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    x = cupy.asarray(x_host)
    built = nets.mobilenet_v2(backend="cupy", seed=0).eval()
    folded = nn.fold_batchnorms(built)
    unfused = _activations_as_layers(nn.fold_batchnorms(built))
    expected_net = to_torch(built).eval()
    for network in (built, folded, unfused):
        network.to("gpu")
    graph, unfused_graph = nn.CapturedNetwork(folded), nn.CapturedNetwork(unfused)

    def eager(net):
        def run():
            with nn.no_grad():
                return net(x)

        return run

    contenders = {
        "cupy": eager(built),
        "cupy (BN folded)": eager(folded),
        "cupy (BN folded, ReLU6 as layers)": eager(unfused),
        "cupy (BN folded, CUDA graph)": lambda: graph(x),
        "cupy (BN folded, ReLU6 as layers, CUDA graph)": lambda: unfused_graph(x),
    }
    with torch.inference_mode():
        expected = expected_net(torch.from_numpy(x_host)).numpy()
    errors = {name: _relative_error(cupy.asnumpy(fn()), expected) for name, fn in contenders.items()}
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        model = expected_net.cuda()
        tx = torch.from_numpy(x_host).cuda()

        def torch_eager():
            with torch.inference_mode():
                return model(tx)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(3):
                model(tx)
        torch.cuda.current_stream().wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured), torch.inference_mode():
            model(tx)
        contenders["torch eager (cuDNN FP32)"] = torch_eager
        contenders["torch CUDA graph"] = captured.replay
    timer = get_backend("cupy").timer
    timings = measure_side_by_side(
        {name: Contender(fn, timer) for name, fn in contenders.items()},
        repeat=repeat,
        warmup=3,
        rounds=min(repeat, 7),
    )
    result = {
        "median_s": {n: t.median for n, t in timings.items()},
        "low_s": {n: t.low for n, t in timings.items()},
        "high_s": {n: t.high for n, t in timings.items()},
        "max_relative_error": errors,
        "graph_fallback": graph.fallback_reason or unfused_graph.fallback_reason,
    }
    for key, base_name in (
        ("speedup_vs_torch_eager", "torch eager (cuDNN FP32)"),
        ("speedup_vs_torch_graph", "torch CUDA graph"),
    ):
        base = result["median_s"].get(base_name)
        result[key] = {n: base / t for n, t in result["median_s"].items()} if base else {}
    return result


def training_accuracy(backends: list[str]) -> dict[str, dict]:
    """``convsuite train``'s defaults on each backend: test accuracy and seconds."""
    out = {}
    for name in backends:
        result = nets.train_lenet5(nets.TrainConfig(backend=name))
        out[name] = {
            "test_accuracy": result.test_accuracy,
            "seconds": result.seconds,
            "loss_per_epoch": result.loss_per_epoch,
        }
    return out


def _print_mobilenet(result: dict) -> None:
    rows = result["end_to_end"]
    print("\nMobileNetV2-1.0, batch 1, 224x224, inference (end to end, side by side)")
    print(f"{'contender':<24} {'median ms':>10} {'min-max ms':>17} {'vs torch':>9} {'max rel err':>12}")
    for name, row in rows.items():
        err = result["max_relative_error"].get(name)
        print(
            f"{name:<24} {row['median_s'] * 1e3:>10.2f} {row['low_s'] * 1e3:>8.2f}-{row['high_s'] * 1e3:<8.2f} "
            f"{row['speedup_vs_torch']:>8.2f}x {'' if err is None else f'{err:.1e}':>12}"
        )
    categories: list[str] = []
    for table in result["layer_types"].values():
        categories += [c for c in table if c not in categories]
    names = list(result["layer_types"])
    print("\nper layer type, ms (sum of per-layer medians; layers timed one by one)")
    print(f"{'layer type':<16} " + " ".join(f"{n[:22]:>22}" for n in names))
    for category in categories:
        cells = [result["layer_types"][n].get(category) for n in names]
        print(f"{category:<16} " + " ".join(f"{'-' if c is None else f'{c * 1e3:.2f}':>22}" for c in cells))


def _print_lenet(result: dict) -> None:
    print(f"\nLeNet-5 training step (forward, loss, backward, SGD), batch {result['batch']}, digits 32x32")
    print(f"{'contender':<16} {'median ms':>10} {'min-max ms':>17} {'vs torch':>9}")
    for name, row in result["step"].items():
        print(
            f"{name:<16} {row['median_s'] * 1e3:>10.2f} {row['low_s'] * 1e3:>8.2f}-{row['high_s'] * 1e3:<8.2f} "
            f"{row['speedup_vs_torch']:>8.2f}x"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the network benchmarks and print the tables."""
    from ._arguments import backend_names, out_file, positive

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.networks",
        description=__doc__ or "",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--backends", type=backend_names(), default=None, help="comma-separated CPU backends (default: all but python)"
    )
    parser.add_argument("--repeat", type=positive, default=10, help="timed calls per contender (default 10)")
    parser.add_argument("--threads", type=positive, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--only", choices=["mobilenet", "lenet"], default=None, help="run one of the two")
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="also MobileNetV2 batch 1 on the GPU: cupy eager, BN folded, CUDA graph, torch",
    )
    parser.add_argument("--train", action="store_true", help="also train LeNet-5 with the defaults per backend")
    parser.add_argument("--out", type=out_file, default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    if args.backends:
        usable = _cpu_backends(args.backends)
        if len(usable) < len(args.backends):
            infos = {b.name: b for b in convsuite.list_backends()}
            why = [
                f"{n} ({'a GPU backend' if infos[n].device != 'cpu' else f'unavailable: {infos[n].reason}'})"
                for n in args.backends
                if n not in usable
            ]
            parser.error(f"--backends: not an available CPU backend: {', '.join(why)}")
    try:
        import torch
    except ImportError:
        parser.error("the anchor is torch CPU: pip install torch")
    torch.set_num_threads(args.threads)
    from .machine import cpu_description

    backends = _cpu_backends(args.backends)
    report = {
        "machine": cpu_description(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": f"{torch.__version__}, {args.threads} threads, eager",
        "backends": backends,
    }
    print(f"{report['machine']}; torch {report['torch']}; {report['date']}")
    if args.only in (None, "mobilenet"):
        report["mobilenet_v2_batch1"] = mobilenet_table(backends, args.repeat)
        _print_mobilenet(report["mobilenet_v2_batch1"])
    if args.only in (None, "lenet"):
        report["lenet5_train_step"] = lenet_training_step(backends, 64, args.repeat)
        _print_lenet(report["lenet5_train_step"])
    if args.gpu:
        report["mobilenet_v2_batch1_gpu"] = gpu = gpu_mobilenet(max(args.repeat, 20))
        print("\nMobileNetV2-1.0, batch 1, GPU, device-resident input (CUDA events, interleaved, medians)")
        for name, seconds in gpu["median_s"].items():
            spread = f"({gpu['low_s'][name] * 1e3:.3f}-{gpu['high_s'][name] * 1e3:.3f})"
            eager = gpu["speedup_vs_torch_eager"].get(name)
            graph = gpu["speedup_vs_torch_graph"].get(name)
            err = gpu["max_relative_error"].get(name)
            print(
                f"{name:<46} {seconds * 1e3:>7.3f} ms {spread:>15}"
                f"  {'' if eager is None else f'{eager:.2f}x torch eager':>17}"
                f"  {'' if graph is None else f'{graph:.2f}x torch graph':>17}"
                f"  {'' if err is None else f'max rel err {err:.1e}'}"
            )
        if gpu["graph_fallback"]:
            print(f"CUDA graph capture failed, ran eagerly: {gpu['graph_fallback']}")
    if args.train:
        report["lenet5_digits_accuracy"] = training_accuracy(backends)
        print("\nLeNet-5 on digits, convsuite train defaults")
        for name, row in report["lenet5_digits_accuracy"].items():
            print(f"{name:<10} test accuracy {row['test_accuracy']:.4f}  ({row['seconds']:.0f} s)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
