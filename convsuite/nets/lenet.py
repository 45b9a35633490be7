"""LeNet-5: the classic 32x32 network and the ECE408 FA21 variant (86x86, 7x7 kernels)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from .._validation import weight_generator

__all__ = ["LENET5_VARIANTS", "lenet5"]

#: Input size (H = W) of each variant.
LENET5_VARIANTS = {"classic": 32, "ece408-fa21": 86}


def lenet5(
    variant: str = "classic",
    *,
    num_classes: int = 10,
    backend: str | None = None,
    dtype: Any = "float32",
    seed: int | np.random.Generator | None = 0,
) -> nn.Sequential:
    """LeNet-5 as an :class:`convsuite.nn.Sequential`.

    ``"classic"`` (input ``(B, 1, 32, 32)``): conv 1->6 5x5, ReLU, max-pool 2,
    conv 6->16 5x5, ReLU, max-pool 2, fc 400->120, ReLU, fc 120->84, ReLU,
    fc 84->10 (LeCun et al. 1998 with ReLU and max pooling, as commonly
    trained today).

    ``"ece408-fa21"`` (input ``(B, 1, 86, 86)``, the ECE408 FA21 lecture's
    modified LeNet-5, ``workloads.json``): conv 1->4 7x7, ReLU, pool 2,
    conv 4->16 7x7, ReLU, pool 2, flatten (16*17*17), fc 4624->128, ReLU,
    fc 128->10. The lecture does not print the hidden width; 128 is ours.

    Parameters
    ----------
    variant : {'classic', 'ece408-fa21'}
    num_classes : int, default 10
    backend : str, optional
        Backend of the convolutions (default: the usual selection).
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional
        Seed of the (PyTorch-default) initialisation; default 0.

    Returns
    -------
    convsuite.nn.Sequential
        In training mode; the logits are ``(B, num_classes)``.
    """
    if variant not in LENET5_VARIANTS:
        raise ValueError(f"`variant` must be one of {', '.join(map(repr, LENET5_VARIANTS))}; got {variant!r}")
    rng = weight_generator(seed)
    conv = dict(backend=backend, dtype=dtype, seed=rng)
    if variant == "classic":
        c1, c2, k, flat, hidden = 6, 16, 5, 16 * 5 * 5, (120, 84)
    else:
        c1, c2, k, flat, hidden = 4, 16, 7, 16 * 17 * 17, (128,)
    layers: list[nn.Module] = [
        nn.Conv2D(1, c1, k, **conv),
        nn.ReLU(),
        nn.MaxPool2D(2),
        nn.Conv2D(c1, c2, k, **conv),
        nn.ReLU(),
        nn.MaxPool2D(2),
        nn.Flatten(),
    ]
    widths = (flat, *hidden)
    for fan_in, fan_out in zip(widths, widths[1:]):
        layers += [nn.Linear(fan_in, fan_out, dtype=dtype, seed=rng), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], num_classes, dtype=dtype, seed=rng))
    return nn.Sequential(*layers)
