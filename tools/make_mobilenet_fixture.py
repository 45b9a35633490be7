"""Write tests/data/mobilenet_v2_logits.npz from torchvision (run once, outside the repo's venv).

    python3 -m venv /work/tvenv && /work/tvenv/bin/pip install torch torchvision numpy
    /work/tvenv/bin/python tools/make_mobilenet_fixture.py

Stores torchvision's ``mobilenet_v2().state_dict()`` keys and shapes (less
``num_batches_tracked``), the seeds of ``tests/mobilenet_recipe.py``, and
torchvision's eval-mode logits for those weights and that input, in float32
and float64. The weights themselves are not stored: tests regenerate them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch
import torchvision

REPO = Path(__file__).resolve().parents[1]


def _load_recipe():
    """Import ``tests/mobilenet_recipe.py`` by path (``tests`` is not on ``sys.path`` when run as a script)."""
    spec = importlib.util.spec_from_file_location("mobilenet_recipe", REPO / "tests" / "mobilenet_recipe.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


recipe = _load_recipe()


def main() -> None:
    model = torchvision.models.mobilenet_v2(weights=None).eval()
    keys_and_shapes = [(k, tuple(v.shape)) for k, v in model.state_dict().items() if "num_batches_tracked" not in k]
    weights = recipe.seeded_state_dict(keys_and_shapes)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
    logits = {}
    for name, shape in recipe.INPUTS.items():
        x = torch.from_numpy(recipe.seeded_input(shape=shape))
        with torch.no_grad():
            logits[f"logits_float32_{name}"] = model.float()(x).numpy()
            logits[f"logits_float64_{name}"] = model.double()(x.double()).numpy()
    shapes = np.full((len(keys_and_shapes), 4), -1, dtype=np.int64)
    for row, (_, shape) in enumerate(keys_and_shapes):
        shapes[row, : len(shape)] = shape
    out = REPO / "tests" / "data" / recipe.FIXTURE
    np.savez_compressed(
        out,
        keys=np.array([k for k, _ in keys_and_shapes]),
        shapes=shapes,
        weight_seed=recipe.WEIGHT_SEED,
        input_seed=recipe.INPUT_SEED,
        **{f"input_shape_{name}": np.array(shape) for name, shape in recipe.INPUTS.items()},
        **logits,
        versions=np.array(
            [f"torch {torch.__version__}", f"torchvision {torchvision.__version__}", f"numpy {np.__version__}"]
        ),
    )
    for name in recipe.INPUTS:
        l32, l64 = logits[f"logits_float32_{name}"], logits[f"logits_float64_{name}"]
        print(
            f"{name}: logits {l64.min():.3f}..{l64.max():.3f}, float32 vs float64 max rel "
            f"{np.abs(l32 - l64).max() / np.abs(l64).max():.2e}"
        )
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
