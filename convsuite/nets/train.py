"""Train LeNet-5 on the digits with convsuite's own backward passes and SGD."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import nn
from .data import load_digits_split
from .lenet import LENET5_VARIANTS, lenet5

__all__ = ["TrainConfig", "evaluate", "train_lenet5"]


@dataclass(frozen=True)
class TrainConfig:
    """Settings of :func:`train_lenet5` (the CLI's defaults).

    Attributes
    ----------
    variant : str
        ``"classic"`` (32x32) or ``"ece408-fa21"`` (86x86).
    backend : str or None
        Backend of the convolutions (None: the usual selection).
    epochs, batch, seed : int
    lr, momentum, weight_decay : float
        SGD settings; the learning rate follows a cosine decay from ``lr``
        over the epochs.
    device : str
        ``"cpu"`` or ``"gpu"`` (weights and batches on the GPU through CuPy).
    """

    variant: str = "classic"
    backend: str | None = None
    epochs: int = 10
    batch: int = 32
    seed: int = 0
    lr: float = 0.03
    momentum: float = 0.9
    weight_decay: float = 1e-4
    device: str = "cpu"


@dataclass
class TrainResult:
    """What a training run produced (written to ``train.json`` by the CLI)."""

    network: nn.Module
    test_accuracy: float
    loss_per_epoch: list[float]
    test_accuracy_per_epoch: list[float]
    seconds: float
    layer_times: nn.LayerTimes
    config: TrainConfig
    sizes: dict = field(default_factory=dict)

    def layer_seconds(self) -> dict[str, dict]:
        """``name -> {type, category, forward, backward}`` total seconds over the run."""
        out: dict[str, dict] = {}
        for name, (layer_type, category) in self.layer_times.kinds.items():
            out[name] = {
                "type": layer_type,
                "category": category,
                **{d: sum(self.layer_times.samples.get((name, d), [])) for d in ("forward", "backward")},
            }
        return out


def _on_device(array, device: str):
    """``array`` on the GPU (CuPy) or as is."""
    if device == "gpu":
        import cupy

        return cupy.asarray(array)
    return array


def evaluate(network: nn.Module, x: np.ndarray, y: np.ndarray, *, batch: int = 256, device: str = "cpu") -> float:
    """Share of ``x`` that ``network`` (set to evaluation mode) classifies as ``y``."""
    network.eval()
    correct = 0
    with nn.no_grad():
        for start in range(0, len(x), batch):
            logits = network(_on_device(x[start : start + batch], device))
            predicted = nn._xp.to_numpy(logits.argmax(axis=1))
            correct += int((predicted == y[start : start + batch]).sum())
    return correct / len(x)


def train_lenet5(
    config: TrainConfig = TrainConfig(), *, progress: Callable[[int, int, float], None] | None = None
) -> TrainResult:
    """Train LeNet-5 on the scikit-learn digits; deterministic for a seed on one backend.

    Parameters
    ----------
    config : TrainConfig
    progress : callable, optional
        Called after each batch as ``progress(step, total_steps, running_loss)``.

    Returns
    -------
    TrainResult
        The trained network, test accuracy, loss per epoch and per-layer times.
    """
    if config.variant not in LENET5_VARIANTS:
        raise ValueError(f"`variant` must be one of {', '.join(LENET5_VARIANTS)}; got {config.variant!r}")
    for name in ("epochs", "batch"):
        value = getattr(config, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
    data = load_digits_split(LENET5_VARIANTS[config.variant], seed=config.seed)
    rng = np.random.default_rng(config.seed)
    network = lenet5(config.variant, backend=config.backend, seed=rng)
    if config.device == "gpu":
        network.to("gpu")
    criterion = nn.CrossEntropyLoss()
    optimiser = nn.SGD(network.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    steps_per_epoch = -(-len(data.x_train) // config.batch)
    total_steps = steps_per_epoch * config.epochs
    losses, accuracies = [], []
    running = None
    step = 0
    start = time.perf_counter()
    with nn.record_layer_times(network) as layer_times:
        for epoch in range(config.epochs):
            # Cosine decay of the learning rate: large steps early, small ones
            # at the end, so the final epochs settle instead of oscillating.
            optimiser.lr = config.lr * 0.5 * (1 + math.cos(math.pi * epoch / config.epochs))
            network.train()
            order = rng.permutation(len(data.x_train))
            epoch_loss = 0.0
            for first in range(0, len(order), config.batch):
                index = order[first : first + config.batch]
                x = _on_device(data.x_train[index], config.device)
                y = _on_device(data.y_train[index], config.device)
                optimiser.zero_grad()
                loss = float(criterion(network(x), y))
                network.backward(criterion.backward(), input_grad=False)  # the images need none
                optimiser.step()
                epoch_loss += loss * len(index)
                running = loss if running is None else 0.9 * running + 0.1 * loss
                step += 1
                if progress is not None:
                    progress(step, total_steps, running)
            losses.append(epoch_loss / len(order))
            accuracies.append(evaluate(network, data.x_test, data.y_test, device=config.device))
    seconds = time.perf_counter() - start
    return TrainResult(
        network=network,
        test_accuracy=accuracies[-1],
        loss_per_epoch=losses,
        test_accuracy_per_epoch=accuracies,
        seconds=seconds,
        layer_times=layer_times,
        config=config,
        sizes={"train": len(data.x_train), "test": len(data.x_test)},
    )
