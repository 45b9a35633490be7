"""Time a network layer by layer: the seed reports' per-layer-type tables.

:func:`profile` runs a network ``repeat`` times after a warm-up, timing every
leaf layer with its device's timer (CUDA events for CuPy arrays), and the
host-device transfers of input and output apart from the layers. The
result gives medians per layer and totals per layer type (convolution,
pooling, element-wise, ... as in the kitten report's Table I), and the
end-to-end time of a whole pass measured separately (without per-layer
synchronisation, so it is what a user sees).
"""

from __future__ import annotations

import statistics
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from .. import nn
from .._arrays import is_cupy_array
from .._validation import _is_int, _show, positive_int
from ..nn._timing import device_timer
from ..nn._xp import array_module

__all__ = ["NetworkProfile", "ece408_times", "profile"]


@dataclass
class NetworkProfile:
    """Per-layer medians of a network's passes.

    Attributes
    ----------
    layers : list of dict
        One per leaf layer in call order: ``name``, ``type`` (class),
        ``category``, ``forward_s`` (median seconds) and, when backward was
        timed, ``backward_s``.
    total_s : dict
        Median end-to-end seconds per direction (``"forward"``, and
        ``"backward"`` when timed), measured in separate untimed-per-layer runs.
    transfer_s : dict
        ``"host_to_device"`` and ``"device_to_host"`` medians (0 on the CPU).
    device : str
        ``"cpu"`` or ``"gpu"``.
    repeat : int
        Timed passes behind each median.
    spread : dict
        Per direction, the (min, max) end-to-end seconds of the repeats.
    """

    layers: list[dict]
    total_s: dict[str, float]
    transfer_s: dict[str, float]
    device: str
    repeat: int
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)

    def _key(self, direction: str) -> str:
        """The row key of ``direction``; ValueError unless it is a direction this profile timed.

        One check for every reader: an unknown direction gave a KeyError in
        :meth:`table` but an empty dict or 0 in the others, as if nothing ran.
        """
        if not isinstance(direction, str) or direction not in self.total_s:
            timed = " or ".join(map(repr, self.total_s))
            hint = "" if "backward" in self.total_s else " (profile(..., backward=True) times 'backward' too)"
            raise ValueError(f"`direction` must be {timed}, the directions profiled{hint}; got {direction!r}")
        return f"{direction}_s"

    def by_category(self, direction: str = "forward") -> dict[str, dict[str, float]]:
        """``category -> {"layers": count, "seconds": summed medians}`` in first-seen order.

        Raises
        ------
        ValueError
            ``direction`` is not one of the profiled directions (``total_s``).
        """
        key = self._key(direction)
        out: dict[str, dict[str, float]] = {}
        for row in self.layers:
            if key not in row:
                continue
            entry = out.setdefault(row["category"], {"layers": 0, "seconds": 0.0})
            entry["layers"] += 1
            entry["seconds"] += row[key]
        return out

    def layer_sum(self, direction: str = "forward", category: str | None = None) -> float:
        """Sum of the per-layer medians (of one category, if given).

        Raises
        ------
        ValueError
            ``direction`` is not one of the profiled directions (``total_s``).
        """
        key = self._key(direction)
        return sum(r[key] for r in self.layers if key in r and (category is None or r["category"] == category))

    def table(self, direction: str = "forward") -> str:
        """The per-layer-type table as text (the kitten report's Table I).

        Raises
        ------
        ValueError
            ``direction`` is not one of the profiled directions (``total_s``).
        """
        total = self.layer_sum(direction)  # checks ``direction`` first
        lines = [f"{'layer type':<16} {'layers':>6} {'ms':>10} {'share':>7}"]
        for category, entry in self.by_category(direction).items():
            share = entry["seconds"] / total if total else 0.0
            lines.append(f"{category:<16} {entry['layers']:>6d} {entry['seconds'] * 1e3:>10.3f} {share:>7.1%}")
        lines.append(f"{'sum of layers':<16} {'':>6} {total * 1e3:>10.3f}")
        lines.append(f"{'end to end':<16} {'':>6} {self.total_s[direction] * 1e3:>10.3f}")
        if self.device == "gpu":
            for name, seconds in self.transfer_s.items():
                lines.append(f"{name.replace('_', ' '):<16} {'':>6} {seconds * 1e3:>10.3f}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """Plain data for JSON reports."""
        return {
            "device": self.device,
            "repeat": self.repeat,
            "layers": self.layers,
            "by_category": {d: self.by_category(d) for d in self.total_s},
            "total_s": self.total_s,
            "spread_s": {d: list(s) for d, s in self.spread.items()},
            "transfer_s": self.transfer_s,
        }


def _network_device(network: nn.Module) -> str:
    """Where the network's parameters live."""
    params = network.parameters()
    return "gpu" if params and is_cupy_array(params[0].data) else "cpu"


def _timed(fn, device: str):
    """(result, seconds) of ``fn()`` with the timer of ``device``."""
    timer = device_timer(device)
    timer.start()
    out = fn()
    return out, timer.stop()


def _synchronize(array) -> None:
    if is_cupy_array(array):
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _count(value, name: str) -> int:
    """A non-negative int (bools refused), or an error naming ``name``."""
    if not _is_int(value):
        raise TypeError(f"`{name}` must be a non-negative int; got {_show(value)}")
    if value < 0:
        raise ValueError(f"`{name}` must be a non-negative int (>= 0); got {_show(value)}")
    return int(value)


def _check_batch(x, labels, batch, labels_name: str) -> int:
    """``batch`` as an int, after checking that ``x`` is not empty, that ``batch`` is a positive
    int and that ``labels`` (if given) has one entry per image.

    ``range(0, n, batch)`` alone fails on 0 with a message naming nothing and
    runs no pass at all for a negative ``batch`` (an accuracy of 0.0 with no
    error); an empty ``x`` would divide by zero; a labels-length mismatch
    would surface as a NumPy broadcast error.
    """
    n = len(x)
    if n == 0:  # first: with batch=None, "all at once" is a batch of 0
        raise ValueError(f"`x` must hold at least one image; got {_show(x)}")
    batch = positive_int(batch, "batch")
    if labels is not None:
        _check_labels(labels, n, labels_name)
    return batch


def _check_labels(labels, n: int, name: str) -> None:
    """``labels`` must be ``n`` integer classes in one axis.

    A column ``(n, 1)`` would broadcast against the ``(n,)`` predictions into an
    ``n x n`` comparison (an "accuracy" of up to ``n``), and one-hot, float or
    string labels would compare unequal everywhere (a silent 0.0).
    """
    shape = getattr(labels, "shape", None)
    dtype = getattr(labels, "dtype", None)
    try:
        dtype = None if dtype is None else np.dtype(dtype)
    except TypeError:  # another library's dtype (a torch tensor's): read the labels as NumPy reads them
        dtype = None
    if shape is None or dtype is None:  # a list or tuple: read as NumPy reads it
        try:
            as_array = np.asarray(labels)
        except ValueError as exc:  # ragged nesting
            raise ValueError(f"`{name}` must be {n} integer classes, one per image; got {_show(labels)}") from exc
        shape, dtype = as_array.shape, as_array.dtype
    if len(shape) != 1 or np.dtype(dtype).kind not in "iu":
        raise ValueError(
            f"`{name}` must be {n} integer classes in one axis, one per image of `x` (shape ({n},)); "
            f"got shape {tuple(shape)} of {np.dtype(dtype)}"
        )
    if shape[0] != n:
        raise ValueError(f"`{name}` must have one entry per image of `x` ({n}); got {shape[0]}")


def profile(network: nn.Module, x, repeat: int = 5, *, backward: bool = False, warmup: int = 1) -> NetworkProfile:
    """Time ``network`` on ``x``: per layer, per layer type, end to end and transfers.

    Parameters
    ----------
    network : convsuite.nn.Module
        Used in its current mode (call ``.eval()`` first for inference).
    x : ndarray
        Input batch. A NumPy input to a network whose weights are on the GPU
        is copied there first, and that copy (and the copy of the output
        back) is timed apart from the layers.
    repeat : int, default 5
        Timed passes, a positive int (not a bool); medians are reported.
    backward : bool, default False
        Also time the backward pass (output gradient: ones), as in a
        training step (no gradient with respect to the input).
    warmup : int, default 1
        Untimed passes first (JIT compilation, kernel loading, plans), >= 0.

    Returns
    -------
    NetworkProfile
    """
    repeat = positive_int(repeat, "repeat")  # a bool is no count: repeat=True is refused
    warmup = _count(warmup, "warmup")
    device = _network_device(network)
    transfers: dict[str, list[float]] = {"host_to_device": [], "device_to_host": []}
    upload = None
    if device == "gpu" and isinstance(x, np.ndarray):
        import cupy

        def upload():
            return cupy.asarray(x)

    def one_pass():
        seconds = {}
        xd = x
        if upload is not None:
            xd, t = _timed(upload, "gpu")
            transfers["host_to_device"].append(t)
        with nn.no_grad() if not backward else nullcontext():
            y, seconds["forward"] = _timed(lambda: network(xd), device)
        if backward:
            grad = array_module(y).ones_like(y)
            # As a training step: the input needs no gradient (the first layer leaves it out).
            _, seconds["backward"] = _timed(lambda: network.run_backward(grad, input_grad=False), device)
        if upload is not None:
            _, t = _timed(lambda: y.get(), "gpu")
            transfers["device_to_host"].append(t)
        _synchronize(y)
        return seconds

    for _ in range(warmup):
        one_pass()
    totals: dict[str, list[float]] = {"forward": [], **({"backward": []} if backward else {})}
    per_layer: dict[tuple[str, str], list[float]] = {}
    kinds: dict[str, tuple[str, str]] = {}
    # Interleave: an end-to-end pass, then a per-layer pass, so drift in the
    # machine's load hits both alike.
    for _ in range(repeat):
        for direction, seconds in one_pass().items():
            totals[direction].append(seconds)
        with nn.record_layer_times(network) as times:
            one_pass()
        for key, samples in times.samples.items():
            per_layer.setdefault(key, []).append(sum(samples))
        kinds.update(times.kinds)
    layers = []
    for name, (layer_type, category) in kinds.items():
        row = {"name": name, "type": layer_type, "category": category}
        for direction in totals:
            samples = per_layer.get((name, direction))
            if samples:
                row[f"{direction}_s"] = statistics.median(samples)
        layers.append(row)
    return NetworkProfile(
        layers=layers,
        total_s={d: statistics.median(t) for d, t in totals.items()},
        transfer_s={k: (statistics.median(v) if v else 0.0) for k, v in transfers.items()},
        device=device,
        repeat=repeat,
        spread={d: (min(t), max(t)) for d, t in totals.items()},
    )


def ece408_times(network: nn.Module, x, labels=None, *, batch: int | None = None, warmup: bool = True) -> dict:
    """The ECE408 course's figures for one inference pass: accuracy, "Op Time", "Layer Time".

    "Op Time" is the time inside the convolution kernels only (the backend
    call, measured by the front end's kernel recorder; CUDA events on the
    GPU); "Layer Time" is the time of the whole convolution layers (the
    ``convsuite.conv2d`` call around it: validation, dispatch, allocation).
    Both are summed over the pass and reported per convolution layer.

    Parameters
    ----------
    network : convsuite.nn.Module
        Set to evaluation mode here.
    x : ndarray
        The images, ``(N, 1, H, W)``; on the GPU when the network is.
    labels : array_like, optional
        Integer classes; when given, ``accuracy`` is reported.
    batch : int, optional
        Images per forward pass, a positive int (default: all at once).
    warmup : bool, default True
        Run the first batch once, untimed, first (JIT compilation, kernel loading).

    Returns
    -------
    dict
        ``op_time_s``, ``layer_time_s`` (lists, one per convolution layer, in
        call order), their totals, ``whole_network_s`` and ``accuracy``.

    Raises
    ------
    TypeError, ValueError
        ``batch`` is not a positive int, ``x`` is empty, or ``labels`` does
        not have one entry per image.
    """
    from .._instrument import record_kernel_times

    batch = _check_batch(x, labels, len(x) if batch is None else batch, "labels")
    network.eval()
    n = len(x)
    convs = [name for name, m in network.named_modules() if m.category == "convolution"]
    op: dict[str, float] = dict.fromkeys(convs, 0.0)
    layer: dict[str, float] = dict.fromkeys(convs, 0.0)
    correct = 0
    if warmup:
        with nn.no_grad():
            network(x[:batch])
    timer = device_timer(_network_device(network))
    timer.start()
    with nn.no_grad(), nn.record_layer_times(network) as times:
        for start in range(0, n, batch):
            with record_kernel_times() as kernels:
                logits = network(x[start : start + batch])
            # The kernel recorder sees every backend call, in call order: the convolutions.
            for name, seconds in zip(convs, kernels):
                op[name] += seconds
            if labels is not None:
                predicted = nn._xp.to_numpy(logits.argmax(axis=1))
                correct += int((predicted == np.asarray(labels[start : start + batch])).sum())
    whole = timer.stop()
    for name in convs:
        layer[name] = sum(times.samples.get((name, "forward"), []))
    return {
        "op_time_s": [op[c] for c in convs],
        "layer_time_s": [layer[c] for c in convs],
        "total_op_time_s": sum(op.values()),
        "total_layer_time_s": sum(layer.values()),
        "whole_network_s": whole,
        "accuracy": None if labels is None else correct / n,
        "images": n,
    }
