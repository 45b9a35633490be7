"""Named workloads: the seed reports' layers as concrete, runnable cases.

The source of truth is ``workloads.json`` (a copy of the shared seed file);
this module turns each entry into :class:`Case` objects sized for a device:
``cpu_batch`` instead of ``batch`` on the CPU, 1-D signals up to 1e7 samples
on the CPU and 1e9 on a GPU. The real-network zoo (``data/zoo.json``, read by
:mod:`convsuite.bench.zoo`) gives the workloads ``"zoo"`` and ``"zoo:<network>"``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from .._spec import ConvSpec
from .._validation import positive_int
from .zoo import zoo_layers, zoo_networks

__all__ = ["Case", "ZOO_BATCH", "seed_workloads", "layer", "workload_names", "get_workload", "zoo_cases"]

#: Batch of the zoo's cases when none is given: a GPU needs a batch to fill its
#: multiprocessors on the 7x7 layers, and 4 keeps one CPU pass over all ~400
#: layers to minutes on two cores.
ZOO_BATCH = {"cpu": 4, "gpu": 32}


@lru_cache(maxsize=1)
def seed_workloads() -> dict:
    """The parsed workloads file shipped with the package."""
    return json.loads(resources.files(__package__).joinpath("workloads.json").read_text())


def layer(workload: str, name: str) -> dict:
    """One conv2d layer of a seed workload, e.g. ``layer("ece408-fa19", "conv1")``."""
    data = seed_workloads()
    # A non-string (a list) is refused before the lookup, where it would be an unhashable key.
    if not isinstance(workload, str) or workload not in data or "layers" not in data[workload]:
        valid = [k for k, v in data.items() if isinstance(v, dict) and "layers" in v]
        raise ValueError(f"`workload` must be one of {valid}; got {workload!r}")
    for entry in data[workload]["layers"]:
        if entry["name"] == name:
            return {**entry, "batch": data[workload].get("batch"), "cpu_batch": data[workload].get("cpu_batch")}
    names = [entry["name"] for entry in data[workload]["layers"]]
    raise ValueError(f"`name` must be one of {names} for {workload}; got {name!r}")


@dataclass(frozen=True)
class Case:
    """One convolution to measure.

    ``x_shape``/``w_shape`` use the caller's layout (a plain signal is
    ``(N,)`` with ``(K,)``); ``direction`` is ``"forward"`` or ``"backward"``.
    """

    workload: str
    name: str
    op: str
    x_shape: tuple
    w_shape: tuple
    stride: Any = 1
    padding: Any = 0
    groups: int = 1
    bias: bool = True
    direction: str = "forward"
    note: str = ""
    dilation: Any = 1
    #: Cases of one family differ only in size (a sweep); plots join them by a line.
    family: str = ""
    #: A real network's layer: its class (:func:`convsuite.bench.zoo.layer_class`) and the networks it occurs in.
    layer_class: str = ""
    networks: tuple = ()

    @property
    def keywords(self) -> dict:
        """Keyword arguments of the convolution call: stride, padding, dilation, groups."""
        return dict(stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)

    @property
    def label(self) -> str:
        """The case's name, with the direction appended for backward cases."""
        return f"{self.name} {self.direction}" if self.direction == "backward" else self.name

    @property
    def batch(self) -> int:
        """Batch size: the first axis of ``x`` for batched layouts, else 1."""
        return self.x_shape[0] if len(self.x_shape) == len(self.w_shape) and len(self.w_shape) > 2 else 1

    def with_batch(self, batch: int, note: str) -> Case:
        """The same layer at another batch size."""
        return replace(self, x_shape=(batch, *self.x_shape[1:]), note=note)

    def with_signal_length(self, n: int, note: str) -> Case:
        """A plain-signal case at another length."""
        return replace(self, x_shape=(n,), note=note)

    def arrays(self, dtype, seed: int = 0):
        """Random inputs (never zeros): x, w, bias or None, and grad_y for backward."""
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(self.x_shape).astype(dtype)
        w = rng.standard_normal(self.w_shape).astype(dtype)
        bias = rng.standard_normal(self.w_shape[0]).astype(dtype) if self.bias and len(self.w_shape) > 2 else None
        return x, w, bias, rng

    def spec(self, dtype) -> ConvSpec:
        """The normalised problem, without allocating inputs (zero-strided stand-ins)."""
        from .. import explain

        def shaped(shape):
            return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=dtype), shape, (0,) * len(shape))

        bias = shaped((self.w_shape[0],)) if self.bias and len(self.w_shape) > 2 else None
        return explain(shaped(self.x_shape), shaped(self.w_shape), bias, **self.keywords).spec

    def as_dict(self) -> dict:
        """The case's fields as a dict."""
        return asdict(self)


def _signal_cases(device: str) -> list[Case]:
    entry = seed_workloads()["conv1d-signal"]
    limit = 10**7 if device == "cpu" else 10**9
    cases = []
    for n in entry["signal_lengths"]:
        if n > limit:
            continue
        for k in entry["mask_widths"]:
            cases.append(
                Case(
                    "conv1d-signal",
                    f"N={n:.0e} K={k}",
                    "conv1d",
                    (n,),
                    (k,),
                    padding="same",
                    bias=False,
                    family=f"1-D K={k}",
                )
            )
    return cases


def _layer_cases(workload: str, device: str) -> list[Case]:
    data = seed_workloads()[workload]
    batch = data["batch"] if device == "gpu" else data.get("cpu_batch", data["batch"])
    directions = ("forward", "backward") if "backward" in data["op"] else ("forward",)
    cases = []
    for entry in data["layers"]:
        for direction in directions:
            cases.append(
                Case(
                    workload,
                    f"{entry['name']} B={batch}",
                    "conv2d",
                    (batch, entry["C"], entry["H"], entry["W"]),
                    (entry["M"], entry["C"], entry["K"], entry["K"]),
                    stride=entry["stride"],
                    padding=entry["padding"],
                    direction=direction,
                )
            )
    return cases


def _mobilenet_cases(device: str) -> list[Case]:
    # The report's loop table gives output sizes; 3x3 layers use padding 1, so
    # a stride-s layer reads an input s times larger; 1x1 layers read Hout.
    cases = []
    for row in seed_workloads()["mobilenetv2-kitten"]["report_loop_table"]:
        k = int(math.isqrt(row["KK"]))
        s = row.get("stride", 1)
        pad = 1 if k == 3 else 0
        h, w = row["Hout"] * s, row["Wout"] * s
        g = row["groups"]
        kind = "dw" if g > 1 else ("pw" if k == 1 else "conv")
        cases.append(
            Case(
                "mobilenetv2",
                f"{kind} {row['C']}->{row['M']} {h}x{w} k{k} s{s}",
                "conv2d",
                (1, row["C"], h, w),
                (row["M"], row["C"] // g, k, k),
                stride=s,
                padding=pad,
                groups=g,
            )
        )
    return cases


def _default_cases(device: str) -> list[Case]:
    """A small mix that runs on every available backend in well under two minutes."""
    return [
        Case("default", "3x3 C16->32 32x32 B=8", "conv2d", (8, 16, 32, 32), (32, 16, 3, 3), padding="same"),
        Case(
            "default",
            "dw3x3 s2 C32 56x56 B=4",
            "conv2d",
            (4, 32, 56, 56),
            (32, 1, 3, 3),
            stride=2,
            padding=1,
            groups=32,
        ),
        Case("default", "fa21-conv1 B=16", "conv2d", (16, 1, 86, 86), (4, 1, 7, 7)),
        Case("default", "1-D N=1e5 K=7", "conv1d", (100_000,), (7,), padding="same", bias=False),
        Case("default", "1-D N=1e6 K=31", "conv1d", (1_000_000,), (31,), padding="same", bias=False),
        Case(
            "default",
            "3x3 C16->16 24x24 B=4",
            "conv2d",
            (4, 16, 24, 24),
            (16, 16, 3, 3),
            padding=1,
            direction="backward",
        ),
    ]


def _check_device(device: Any) -> str:
    """``device`` itself if it is "cpu" or "gpu"."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
    return device


def _zoo_case_name(entry: dict, network: str | None) -> str:
    """``net/shortest.module.path KxK C->M HxW`` plus stride, dilation and groups where not 1."""
    paths = [p for p in entry["paths"] if network is None or p.partition(":")[0] == network]
    net, _, path = min(paths, key=lambda p: (len(p.partition(":")[2]), p)).partition(":")

    def dims(values) -> str:  # a square stride or dilation as one number, a kernel always in full
        return "x".join(map(str, values))

    def step(values) -> str:
        return str(values[0]) if len(set(values)) == 1 else dims(values)

    if entry["op"] == "conv2d":
        name = f"{net}/{path} {dims(entry['kernel'])} {entry['C']}->{entry['M']} {entry['H']}x{entry['W']}"
    else:
        name = f"{net}/{path} k{entry['kernel'][0]} {entry['C']}->{entry['M']} L{entry['W']}"
    extras = [("s", step(entry["stride"]), entry["stride"]), ("d", step(entry["dilation"]), entry["dilation"])]
    name += "".join(f" {tag}{text}" for tag, text, values in extras if max(values) > 1)
    return name + (f" g{entry['groups']}" if entry["groups"] > 1 else "")


def zoo_cases(
    batch: int | None = None, network: str | None = None, direction: str = "forward", device: str = "cpu"
) -> list[Case]:
    """The real-network zoo's distinct layers as cases.

    Parameters
    ----------
    batch : int, optional
        Batch size of every case; default ``ZOO_BATCH[device]`` (32 on a
        GPU, 4 on the CPU).
    network : str, optional
        One of :func:`convsuite.bench.zoo.zoo_networks`: only its layers,
        named after its own module paths. Default: every layer of the zoo.
    direction : {"forward", "backward"}, optional
        The direction of every case.
    device : {"cpu", "gpu"}, optional
        Only chooses the default batch.

    Returns
    -------
    list of Case
        One case per distinct layer, in the zoo's order, of workload
        ``"zoo"`` or ``"zoo:<network>"``, named after the layer's shortest
        module path and its geometry, e.g. ``"resnet18/layer1.0.conv1 3x3
        64->64 56x56"``; ``note`` gives its class and occurrence count.
        Padding is passed per side, as the network has it.

    Raises
    ------
    ValueError, TypeError
        For an unknown network, direction or device, or a batch that is not
        a positive int.
    """
    device = _check_device(device)
    batch = ZOO_BATCH[device] if batch is None else positive_int(batch, "batch")
    if direction not in ("forward", "backward"):
        raise ValueError(f"`direction` must be 'forward' or 'backward'; got {direction!r}")
    cases = []
    for entry in zoo_layers(network):
        spatial = [entry["H"], entry["W"]] if entry["op"] == "conv2d" else [entry["W"]]
        others = [n for n in entry["networks"] if n != network]
        where = (
            f"in {network}" + (f" (also {', '.join(others)})" if others else "")
            if network
            else f"in {', '.join(others)}"
        )
        cases.append(
            Case(
                "zoo" if network is None else f"zoo:{network}",
                _zoo_case_name(entry, network),
                entry["op"],
                (batch, entry["C"], *spatial),
                (entry["M"], entry["C"] // entry["groups"], *entry["kernel"]),
                stride=tuple(entry["stride"]),
                padding=tuple(tuple(pair) for pair in entry["padding"]),
                groups=entry["groups"],
                bias=entry["bias"],
                direction=direction,
                note=f"{entry['class']}; {entry['count']} {where}",
                dilation=tuple(entry["dilation"]),
                layer_class=entry["class"],
                networks=tuple(entry["networks"]),
            )
        )
    return cases


_BUILDERS = {
    "default": _default_cases,
    "conv1d-signal": _signal_cases,
    "ece408-fa19": lambda device: _layer_cases("ece408-fa19", device),
    "ece408-fa21": lambda device: _layer_cases("ece408-fa21", device),
    "mobilenetv2": _mobilenet_cases,
    "cnn-train-3x3": lambda device: _layer_cases("cnn-train-3x3", device),
}


def workload_names() -> list[str]:
    """Names accepted by :func:`get_workload` and ``convsuite compare --workload``.

    The seed reports' workloads, then ``"zoo"`` (every distinct layer of the
    real-network zoo) and ``"zoo:<network>"`` for each of its networks.
    """
    return [*_BUILDERS, "zoo", *(f"zoo:{net}" for net in zoo_networks())]


def get_workload(name: str, device: str = "cpu") -> list[Case]:
    """The cases of workload ``name`` sized for ``device`` (``"cpu"`` or ``"gpu"``).

    The zoo's workloads run forward at ``ZOO_BATCH[device]``; call
    :func:`zoo_cases` for another batch or direction.
    """
    names = workload_names()
    if not isinstance(name, str) or name not in names:  # a list would be an unhashable key
        raise ValueError(f"`workload` must be one of {', '.join(names)}; got {name!r}")
    device = _check_device(device)
    if name == "zoo" or name.startswith("zoo:"):
        return zoo_cases(network=name.partition(":")[2] or None, device=device)
    return _BUILDERS[name](device)
