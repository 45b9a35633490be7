"""The activation epilogue of the numba forward kernels (``activation="relu"`` / ``"relu6"``).

``act`` is the code of ``convsuite._epilogue.ACTIVATION_CODES`` (0 none, 1
ReLU, 2 ReLU6), a runtime argument: one compiled kernel serves every
activation, and the branch on a loop-invariant ``act`` is hoisted by LLVM.
Both keep NaN, as ``torch.relu`` and ``torch.nn.functional.relu6`` do.
"""

from __future__ import annotations

from numba import njit

__all__ = ["activate"]


@njit(inline="always")
def activate(v, act, zero, six):
    """``v`` through activation ``act``; ``zero`` and ``six`` of ``v``'s dtype."""
    if act >= 1 and v < zero:
        v = zero
    if act == 2 and v > six:
        v = six
    return v
