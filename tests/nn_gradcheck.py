"""Finite-difference checks of the explicit backward passes of convsuite.nn layers."""

from __future__ import annotations

import numpy as np


def numeric_gradient(f, array: np.ndarray, index_list, eps: float = 1e-6) -> np.ndarray:
    """Central differences of scalar ``f()`` with respect to ``array[index]`` (perturbed in place)."""
    out = np.empty(len(index_list))
    for n, index in enumerate(index_list):
        saved = array[index]
        array[index] = saved + eps
        plus = f()
        array[index] = saved - eps
        minus = f()
        array[index] = saved
        out[n] = (plus - minus) / (2 * eps)
    return out


def sample_indices(shape, rng: np.random.Generator, count: int = 40):
    """Up to ``count`` distinct multi-indices of an array of ``shape`` (all of them if fewer)."""
    size = int(np.prod(shape))
    flat = rng.choice(size, size=min(count, size), replace=False)
    return [np.unravel_index(i, shape) for i in flat]


def check_layer(layer, x: np.ndarray, *, seed: int = 0, rtol: float = 1e-5, atol: float = 1e-7) -> None:
    """Backward of ``layer`` at ``x`` (float64) against central differences, for x and every parameter.

    The scalar is ``sum(layer(x) * G)`` for a fixed random ``G``, so the
    analytic gradients are ``layer.backward(G)`` and the accumulated ``.grad``.
    """
    rng = np.random.default_rng(seed)
    y = layer(x)
    G = rng.standard_normal(y.shape)
    for p in layer.parameters():
        p.grad = None
    grad_x = layer.backward(G)
    grads = {id(p): p.grad.copy() for p in layer.parameters()}

    def f():
        return float((layer(x) * G).sum())

    idx = sample_indices(x.shape, rng)
    np.testing.assert_allclose(
        np.array([grad_x[i] for i in idx]),
        numeric_gradient(f, x, idx),
        rtol=rtol,
        atol=atol,
        err_msg=f"{type(layer).__name__}: grad wrt input",
    )
    for name, p in layer.named_parameters():
        idx = sample_indices(p.data.shape, rng)
        np.testing.assert_allclose(
            np.array([grads[id(p)][i] for i in idx]),
            numeric_gradient(f, p.data, idx),
            rtol=rtol,
            atol=atol,
            err_msg=f"{type(layer).__name__}: grad wrt {name}",
        )
