"""convsuite against torch on many layers: side by side, per layer, and summarised per class.

Each layer is timed through the public API as a user calls it (``cs.conv2d``
with ``auto`` under the precision and thread settings in force, operands
already on the device) interleaved with torch's own call on the same data
(cuDNN on a GPU with TF32 off unless asked, ``benchmark`` mode; oneDNN/MKL on
the CPU), with warm-up, alternating rounds and medians
(:func:`convsuite._timing.measure_side_by_side`; CUDA events on a GPU).
Backward compares ``conv*_backward`` (dX, dW and db) with torch's autograd
backward of the same convolution (its forward taken once, outside the timed
call). Optionally every algorithm of a backend is timed too, pinned by name:
the best convsuite could have done, and the data a rule is fitted on.

The error of every output against a float64 reference is recorded beside its
time (relative L2 norm), for convsuite and for torch alike, so a speed figure
always travels with its accuracy.

``python -m convsuite.bench.versus --workload zoo --device gpu --batch 32``
prints the summary and writes the rows as JSON; :func:`summarise` is the
summary of any such rows.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .timing import passive_openmp
from .workloads import Case

__all__ = ["LayerResult", "compare_layers", "main", "summarise"]


@dataclass
class LayerResult:
    """One layer in one direction at one batch: median seconds and relative L2 error of each contender.

    Attributes
    ----------
    name, layer_class, network : str
        The case's name, its class (``"depthwise"``, ``"1d-dilated"``, ...) and its network (zoo cases).
    direction : str
    batch : int
    times : dict
        Contender -> median seconds (``"convsuite"``, ``"torch"``, ``"cupy/<algorithm>"``, ...).
    errors : dict
        Contender -> relative L2 error of its output(s) against float64.
    chosen : str
        ``backend/algorithm`` that ``auto`` ran.
    skipped : dict
        Contender -> why it could not run this layer.
    """

    name: str
    layer_class: str
    network: str
    direction: str
    batch: int
    times: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    chosen: str = ""
    skipped: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """Torch's time over convsuite's (> 1: convsuite is faster); None when either is missing."""
        ours, theirs = self.times.get("convsuite"), self.times.get("torch")
        return None if not ours or not theirs else theirs / ours

    @property
    def best_ratio(self) -> float | None:
        """Torch's time over the fastest pinned algorithm's (what a perfect choice would give)."""
        pinned = [t for name, t in self.times.items() if "/" in name]
        theirs = self.times.get("torch")
        return None if not pinned or not theirs else theirs / min(pinned)


def _geomean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summarise(rows: Sequence[LayerResult], floor: float = 0.8) -> list[str]:
    """Lines of a summary: per batch and direction the geomean ratio, layers below ``floor``, the worst
    layer (and its class and algorithm), and the geomean per layer class.
    """
    lines = []
    groups: dict[tuple[int, str], list[LayerResult]] = {}
    for row in rows:
        groups.setdefault((row.batch, row.direction), []).append(row)
    for (batch, direction), members in sorted(groups.items()):
        rated = [r for r in members if r.ratio is not None]
        if not rated:
            continue
        geo = _geomean([r.ratio for r in rated])
        best = _geomean([r.best_ratio for r in rated if r.best_ratio is not None])
        below = [r for r in rated if r.ratio < floor]
        worst = min(rated, key=lambda r: r.ratio)
        lines.append(
            f"batch {batch} {direction}: geomean {geo:.2f}x torch over {len(rated)} layers"
            + (f" (best pinned algorithm per layer: {best:.2f}x)" if best else "")
            + f"; {len(below)} below {floor}x; worst {worst.ratio:.2f}x: {worst.name} [{worst.layer_class}] "
            f"ran {worst.chosen}"
        )
        classes: dict[str, list[float]] = {}
        for r in rated:
            classes.setdefault(r.layer_class, []).append(r.ratio)
        for name, ratios in sorted(classes.items(), key=lambda item: _geomean(item[1])):
            lines.append(
                f"    {name:<14} {_geomean(ratios):5.2f}x over {len(ratios):3d} layers (min {min(ratios):.2f}x)"
            )
    return lines


# --- the contenders ------------------------------------------------------------


def _torch_module():
    import torch

    return torch


class _TorchEvents:
    """A timer on torch's CUDA events (its current stream), for torch's own calls."""

    def __init__(self):
        torch = _torch_module()
        self._start = torch.cuda.Event(enable_timing=True)
        self._stop = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._start.record()

    def stop(self) -> float:
        self._stop.record()
        self._stop.synchronize()
        return self._start.elapsed_time(self._stop) / 1e3


def _torch_call(case: Case, spec, x, w, bias, grad_y, device: str) -> Callable[[], Any]:
    """Torch's forward, or its autograd backward (dX, dW, db) of a forward taken once."""
    torch = _torch_module()
    where = "cuda" if device == "gpu" else "cpu"
    conv = torch.nn.functional.conv1d if spec.ndim == 1 else torch.nn.functional.conv2d
    tx = torch.as_tensor(np.asarray(x).reshape(spec.x_shape), device=where)
    tw = torch.as_tensor(np.asarray(w).reshape(spec.w_shape), device=where)
    tb = None if bias is None else torch.as_tensor(np.asarray(bias), device=where)
    pads = spec.padding
    symmetric = all(lo == hi for lo, hi in pads)
    flat_pad = [p for pair in reversed(pads) for p in pair]

    def forward(inp, weight, b):
        if not symmetric:
            inp = torch.nn.functional.pad(inp, flat_pad)
        padding = tuple(lo for lo, _ in pads) if symmetric else 0
        return conv(inp, weight, b, stride=spec.stride, padding=padding, dilation=spec.dilation, groups=spec.groups)

    if case.direction == "forward":

        def run_forward():
            with torch.no_grad():
                return forward(tx, tw, tb)

        return run_forward
    tgy = torch.as_tensor(np.asarray(grad_y).reshape(spec.y_shape), device=where)
    xi, wi = tx.clone().requires_grad_(True), tw.clone().requires_grad_(True)
    bi = torch.zeros(spec.out_channels, dtype=tw.dtype, device=where, requires_grad=True)
    out = forward(xi, wi, bi)

    def run_backward():
        return torch.autograd.grad(out, (xi, wi, bi), tgy, retain_graph=True)

    return run_backward


def _reference(case: Case, spec, x, w, bias, grad_y, device: str):
    """The float64 outputs: torch in float64 on the device (cuDNN/oneDNN's float64 paths)."""
    torch = _torch_module()
    run = _torch_call(
        case,
        spec,
        np.asarray(x, np.float64),
        np.asarray(w, np.float64),
        None if bias is None else np.asarray(bias, np.float64),
        None if grad_y is None else np.asarray(grad_y, np.float64),
        device,
    )
    result = run()
    outputs = (result,) if isinstance(result, torch.Tensor) else result
    return [o.detach().double().cpu().numpy() for o in outputs]


def _relative_error(got, want: list[np.ndarray]) -> float:
    """The largest relative L2 error over the outputs (forward: y; backward: dX, dW, db)."""
    torch = sys.modules.get("torch")
    got = got if isinstance(got, (tuple, list)) else (got,)
    worst = 0.0
    for g, r in zip(got, want):
        if g is None:
            continue
        if torch is not None and isinstance(g, torch.Tensor):
            g = g.detach().double().cpu().numpy()
        elif hasattr(g, "get"):
            g = g.get()
        g = np.asarray(g, np.float64).reshape(r.shape)
        norm = float(np.linalg.norm(r))
        worst = max(worst, float(np.linalg.norm(g - r)) / (norm if norm else 1.0))
    return worst


def _operands(case: Case, device: str):
    """float32 operands of ``case`` (normal, seeded by the case): x, w, bias (or None), grad_y (backward)."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    x = rng.standard_normal(case.x_shape, dtype=np.float32)
    w = rng.standard_normal(case.w_shape, dtype=np.float32) / np.float32(math.sqrt(math.prod(case.w_shape[1:])))
    bias = rng.standard_normal(case.w_shape[0], dtype=np.float32) if case.bias else None
    grad_y = None
    if case.direction == "backward":
        import convsuite as cs

        shape = cs.explain(x, w, **case.keywords).spec.y_shape
        grad_y = rng.standard_normal(shape, dtype=np.float32)
    return x, w, bias, grad_y


def sample(cases: Sequence[Case], per_network: int) -> list[Case]:
    """At most ``per_network`` cases of each network, spread over its layer classes (round robin, the
    most work first within a class), in a fixed order: a smaller zoo that keeps every class of every network.
    """
    if isinstance(per_network, bool) or not isinstance(per_network, int) or per_network < 1:
        raise ValueError(f"`per_network` must be an int >= 1; got {per_network!r}")
    import convsuite as cs

    def work(case: Case) -> int:
        return cs.explain(
            np.empty(case.x_shape, np.float32), np.empty(case.w_shape, np.float32), **case.keywords
        ).spec.macs

    taken: dict[str, int] = {}
    chosen: list[Case] = []
    by_network: dict[str, dict[str, list[Case]]] = {}
    for case in cases:
        owner = case.networks[0] if case.networks else case.workload
        by_network.setdefault(owner, {}).setdefault(case.layer_class, []).append(case)
    for owner, classes in sorted(by_network.items()):
        queues = [sorted(members, key=work, reverse=True) for _, members in sorted(classes.items())]
        while taken.get(owner, 0) < per_network and any(queues):
            for queue in queues:
                if queue and taken.get(owner, 0) < per_network:
                    chosen.append(queue.pop(0))
                    taken[owner] = taken.get(owner, 0) + 1
    return chosen


def _convsuite_call(case: Case, operands, algorithm: str = "auto", backend: str | None = None):
    import convsuite as cs

    x, w, bias, grad_y = operands
    keywords = dict(case.keywords, backend=backend, algorithm=algorithm)
    if case.direction == "forward":
        conv = cs.conv1d if case.op == "conv1d" else cs.conv2d
        return lambda: conv(x, w, bias, **keywords)
    conv_backward = cs.conv1d_backward if case.op == "conv1d" else cs.conv2d_backward
    return lambda: conv_backward(grad_y, x, w, **keywords)


def compare_layers(
    cases: Sequence[Case],
    *,
    device: str = "cpu",
    repeat: int = 20,
    rounds: int = 4,
    every_algorithm_of: str | Sequence[str] | None = None,
    torch_tf32: bool = False,
    errors: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    done: Callable[[list[LayerResult]], None] | None = None,
) -> list[LayerResult]:
    """Time convsuite (auto) and torch side by side on every case; see the module's description.

    Parameters
    ----------
    cases : sequence of Case
        What to measure (``zoo_cases(...)``, ``get_workload(...)``).
    device : {"cpu", "gpu"}
    repeat, rounds : int
        Timed calls per contender, in alternating blocks.
    every_algorithm_of : str or sequence of str, optional
        Backends whose every algorithm that can run a case is timed too, pinned by name.
    torch_tf32 : bool
        Let cuDNN use TF32 (torch's default for convolutions); off by default (strict float32).
    errors : bool
        Record each contender's error against float64.
    progress : callable, optional
        ``progress(index, total, name)`` before each case.
    done : callable, optional
        ``done(rows)`` after each case with every row so far (to save finished work as it comes).

    Returns
    -------
    list of LayerResult
    """
    import convsuite as cs
    from convsuite._timing import Contender, measure_side_by_side

    if device not in ("cpu", "gpu"):
        raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
    torch = _torch_module()
    if device == "gpu":
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = bool(torch_tf32)
        torch.backends.cuda.matmul.allow_tf32 = bool(torch_tf32)
        backend = cs.get_backend("cupy")
        to_device, timer = backend.to_device, backend.timer
        torch_timer = _TorchEvents
    else:
        from convsuite._timing import wall_timer

        to_device, timer, torch_timer = (lambda a: a), wall_timer, wall_timer
    names = [every_algorithm_of] if isinstance(every_algorithm_of, str) else list(every_algorithm_of or ())
    pinned_backends = [cs.get_backend(name) for name in names]
    rows = []
    for index, case in enumerate(cases):
        if progress is not None:
            progress(index, len(cases), case.name)
        x, w, bias, grad_y = _operands(case, device)
        spec = cs.explain(x, w, bias, **case.keywords).spec
        operands = tuple(None if a is None else to_device(a) for a in (x, w, bias, grad_y))
        row = LayerResult(case.name, case.layer_class, ",".join(case.networks), case.direction, case.batch)
        explained = cs.explain(*operands[:3], direction=case.direction, **case.keywords)
        row.chosen = f"{explained.backend}/{explained.algorithm}"
        contenders = {
            "convsuite": Contender(_convsuite_call(case, operands), timer),
            "torch": Contender(_torch_call(case, spec, x, w, bias, grad_y, device), torch_timer),
        }
        for pinned_backend in pinned_backends:
            if pinned_backend.available() is not True:
                row.skipped[pinned_backend.name] = str(pinned_backend.available())
                continue
            for name in pinned_backend.algorithms:
                verdict = pinned_backend.can_run(spec, name, case.direction)
                if verdict is True:
                    run = _convsuite_call(case, operands, name, pinned_backend.name)
                    contenders[f"{pinned_backend.name}/{name}"] = Contender(run, timer)
                else:
                    row.skipped[f"{pinned_backend.name}/{name}"] = str(verdict)
        runnable = {}
        for name, contender in contenders.items():
            try:
                contender.run()  # compile and plan outside the timing; a failure is a skip with its reason
                runnable[name] = contender
            except Exception as exc:  # noqa: BLE001 - any contender may fail on a layer; the row says why
                row.skipped[name] = f"{type(exc).__name__}: {exc}"
        timings = measure_side_by_side(runnable, repeat=repeat, rounds=rounds, warmup=2)
        row.times = {name: timing.median for name, timing in timings.items()}
        if errors:
            want = _reference(case, spec, x, w, bias, grad_y, device)
            for name, contender in runnable.items():
                row.errors[name] = _relative_error(contender.run(), want)
        rows.append(row)
        if done is not None:
            done(rows)
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.versus", description="convsuite against torch on many layers, side by side"
    )
    parser.add_argument("--network", help="one network of the zoo (default: every one)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--batch", type=int, action="append", help="batch size (repeatable; default 32 GPU, 4 CPU)")
    parser.add_argument("--direction", choices=("forward", "backward", "both"), default="forward")
    parser.add_argument("--per-network", type=int, help="at most N layers per network, spread over its classes")
    parser.add_argument(
        "--every-algorithm-of", metavar="BACKENDS", help="also time each algorithm of these backends (comma-separated)"
    )
    parser.add_argument("--threads", type=int, help="threads for convsuite and torch alike")
    parser.add_argument("--precision", choices=("highest", "high", "medium"))
    parser.add_argument("--torch-tf32", action="store_true", help="let cuDNN use TF32")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-errors", action="store_true", help="skip the float64 references (faster)")
    parser.add_argument("--out", help="write the rows as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: measure the zoo's layers, print the summary, write the rows."""
    args = _parser().parse_args(argv)
    passive_openmp()  # before torch or numba start their pools: spinning runtimes starve each other
    import convsuite as cs
    from convsuite._files import atomic_write_json, check_writable_file

    from .workloads import zoo_cases

    if args.out:
        check_writable_file(args.out, "--out")
    directions = ("forward", "backward") if args.direction == "both" else (args.direction,)
    cases: list[Case] = []
    for batch in args.batch or [None]:
        for direction in directions:
            found = zoo_cases(batch, args.network, direction, args.device)
            cases += sample(found, args.per_network) if args.per_network else found

    def save(rows: list[LayerResult]) -> None:  # after every layer: a run cut short keeps what it measured
        if args.out:
            atomic_write_json(args.out, {"device": args.device, "rows": [asdict(r) for r in rows]})

    if args.threads:
        cs.set_num_threads(args.threads)
        _torch_module().set_num_threads(args.threads)
    scope = cs.use_precision(args.precision) if args.precision else contextlib.nullcontext()
    with scope:
        rows = compare_layers(
            cases,
            device=args.device,
            repeat=args.repeat,
            every_algorithm_of=args.every_algorithm_of.split(",") if args.every_algorithm_of else None,
            torch_tf32=args.torch_tf32,
            errors=not args.no_errors,
            progress=lambda i, n, name: print(f"[{i + 1}/{n}] {name}", file=sys.stderr, flush=True),
            done=save,
        )
    for line in summarise(rows):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
