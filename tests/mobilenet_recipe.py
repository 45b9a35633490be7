"""The documented recipe for the MobileNetV2 fixture's weights and input (NumPy only).

Used twice: once by ``tools/make_mobilenet_fixture.py`` in a scratch
environment with torchvision, to compute torchvision's logits for these
weights, and in every test run, to regenerate the same weights for
convsuite's ``mobilenet_v2``. The fixture stores keys, shapes, seeds and
logits, never the weights.

Recipe, per ``state_dict`` entry in torchvision's key order, from one
``numpy.random.default_rng(weight_seed)`` stream, drawn in float64 and cast
to float32:

- ``*.running_var``: uniform(0.5, 1.5); ``*.running_mean``: normal(0, 0.1);
- 1-D ``*.weight`` (batch-norm scale): uniform(0.5, 1.5);
- ``*.bias``: normal(0, 0.1);
- other ``*.weight`` (convolution, linear): normal(0, 1) * sqrt(2 / fan_in),
  fan_in = product of every axis after the first.

Inputs: ``default_rng(input_seed).standard_normal(shape)`` as float32, for each shape of ``INPUTS``.
"""

from __future__ import annotations

import math

import numpy as np

WEIGHT_SEED = 20261121
INPUT_SEED = 13
#: Inputs of the fixture: ImageNet size, and a small one that the pure-Python backend runs in seconds.
INPUTS = {"224": (2, 3, 224, 224), "32": (1, 3, 32, 32)}
FIXTURE = "mobilenet_v2_logits.npz"


def seeded_state_dict(keys_and_shapes, weight_seed: int = WEIGHT_SEED) -> dict[str, np.ndarray]:
    """Weights for ``[(key, shape), ...]`` following the recipe in this module's docstring."""
    rng = np.random.default_rng(weight_seed)
    out = {}
    for key, shape in keys_and_shapes:
        shape = tuple(int(n) for n in shape)
        leaf = key.rsplit(".", 1)[-1]
        if leaf == "running_var":
            value = rng.uniform(0.5, 1.5, shape)
        elif leaf == "running_mean":
            value = rng.normal(0.0, 0.1, shape)
        elif leaf == "weight" and len(shape) == 1:
            value = rng.uniform(0.5, 1.5, shape)
        elif leaf == "bias":
            value = rng.normal(0.0, 0.1, shape)
        else:
            value = rng.standard_normal(shape) * math.sqrt(2.0 / math.prod(shape[1:]))
        out[key] = value.astype(np.float32)
    return out


def seeded_input(input_seed: int = INPUT_SEED, shape=INPUTS["224"]) -> np.ndarray:
    """The fixture's input batch."""
    return np.random.default_rng(input_seed).standard_normal(shape).astype(np.float32)
