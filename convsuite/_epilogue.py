"""Activation epilogues of the layer API: ``activation="relu"`` / ``"relu6"`` and ``relu_output=``.

A backend that fuses an epilogue into its kernel says so through an optional
method ``fuses_activation(spec, algorithm, activation) -> bool`` and takes the
``activation`` keyword in ``forward``; every other backend (and algorithm)
gets the epilogue applied here, after its kernel, so every backend supports
the option with the same semantics (those of ``torch.relu`` and
``torch.nn.functional.relu6``): ``relu(v) = 0 if v < 0 else v`` and
``relu6(v) = min(relu(v), 6)`` keep NaN. Backward, the ReLU's gradient is
passed where its output is not ``<= 0`` (``torch.threshold_backward``).

The gradient through the ReLU (``relu_output=`` of the backward functions)
likewise: a backend whose backward kernels read grad_y through the ReLU
output says so through ``fuses_relu_mask(spec, algorithm) -> bool`` and its
``"backward+relu"`` launch takes ``relu_output`` as a seventh operand; for
every other backend and algorithm the plan masks grad_y first
(:func:`mask_relu_gradient`, one pass that writes a masked copy).
"""

from __future__ import annotations

from typing import Any

from ._spec import ConvSpec

__all__ = [
    "ACTIVATIONS",
    "ACTIVATION_CODES",
    "apply_activation",
    "apply_activation_lazy",
    "backend_fuses",
    "backend_fuses_relu_mask",
    "mask_relu_gradient",
    "mask_relu_gradient_lazy",
    "relu_mask_operand",
]

#: What ``activation=`` accepts.
ACTIVATIONS = (None, "relu", "relu6")

#: The compile-time switch of the CUDA kernels' epilogue for each activation
#: (template argument ACT, ``activate<ACT>`` in ``backends/cupy/include/common.cuh``).
ACTIVATION_CODES = {None: 0, "relu": 1, "relu6": 2}


def backend_fuses(backend: Any, spec: ConvSpec, algorithm: str, activation: str | None) -> bool:
    """Whether ``backend`` applies ``activation`` inside the kernel of ``algorithm``."""
    if activation is None:
        return False
    fuses = getattr(backend, "fuses_activation", None)
    return bool(fuses is not None and fuses(spec, algorithm, activation))


def backend_fuses_relu_mask(backend: Any, spec: ConvSpec, algorithm: str) -> bool:
    """Whether ``backend``'s backward kernels of ``algorithm`` read grad_y through the ReLU output."""
    fuses = getattr(backend, "fuses_relu_mask", None)
    return bool(fuses is not None and fuses(spec, algorithm))


def relu_mask_operand(relu_output: Any, dtype: Any, xp: Any) -> Any:
    """``relu_output`` as the fused kernels read it: of ``dtype``, with the same ``<= 0`` answer everywhere."""
    if relu_output.dtype == dtype:
        return relu_output
    # Not a cast: a float64 output too small for float32 would become 0 and
    # mask its gradient. 1 (passes, NaN included) or 0 (masked) is exact.
    return (~(relu_output <= 0)).astype(dtype)


def apply_activation(activation: str | None, out: Any, xp: Any) -> None:
    """Apply ``activation`` to ``out`` in place (after an unfused kernel): one elementwise pass."""
    if activation == "relu":
        xp.maximum(out, 0, out=out)  # NaN propagates, as in torch.relu and the fused kernels
    elif activation == "relu6":
        xp.clip(out, 0, 6, out=out)  # NaN propagates, as in torch's relu6 and the fused kernels


def mask_relu_gradient(grad_y: Any, relu_output: Any, xp: Any) -> Any:
    """``grad_y`` where the ReLU output is not ``<= 0``, else 0 (a new array)."""
    return xp.where(relu_output <= 0, xp.zeros((), dtype=grad_y.dtype), grad_y)


def apply_activation_lazy(activation: str | None, y: Any) -> Any:
    """``activation`` of a lazy (Dask) result, still lazy."""
    if activation in ("relu", "relu6"):
        import dask.array as da

        # NaN propagates, as in the eager path
        return da.maximum(y, 0) if activation == "relu" else da.clip(y, 0, 6)
    return y


def mask_relu_gradient_lazy(grad_y: Any, relu_output: Any) -> Any:
    """:func:`mask_relu_gradient` for Dask operands (either may be eager), still lazy."""
    import dask.array as da

    grad_y = da.asarray(grad_y)
    relu_output = da.asarray(relu_output)
    if relu_output.shape != grad_y.shape:
        raise ValueError(
            f"`relu_output` must have the shape of the forward output (and grad_y), {grad_y.shape}; "
            f"got {relu_output.shape}"
        )
    return da.where(relu_output <= 0, 0, grad_y).astype(grad_y.dtype)
