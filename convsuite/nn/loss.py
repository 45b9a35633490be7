"""Losses: ``forward(logits, targets)`` gives the loss, ``backward()`` its gradient."""

from __future__ import annotations

from typing import Any

from .._validation import _show
from ._xp import array_module, real_input
from .module import Module

__all__ = ["CrossEntropyLoss"]


class CrossEntropyLoss(Module):
    """Mean of ``-log softmax(logits)[target]``, like ``torch.nn.CrossEntropyLoss()``.

    The log-softmax subtracts each row's maximum first, so large logits
    neither overflow nor lose the small ones.

    Call it as ``loss = criterion(logits, targets)`` with ``logits (B, K)``
    and integer ``targets (B,)`` in ``[0, K)``; ``criterion.backward()``
    returns ``d loss / d logits``.

    The batch must not be empty (a mean over no samples is undefined, and its
    gradient would divide by zero) and there must be at least one class:
    both are a ``ValueError``, as are targets of the wrong length or outside
    ``[0, K)`` or that are not integers (floats, bools). Integer logits are
    computed in float64; logits that are not real numbers are a ``TypeError``.
    """

    category = "loss"

    def __init__(self) -> None:
        super().__init__()
        self._cache: tuple[Any, Any, Any] | None = None

    def forward(self, logits: Any, targets: Any) -> Any:
        """Mean cross-entropy of ``logits (B, K)`` against integer ``targets (B,)``."""
        self._cache = None  # a failed call must not leave an earlier batch for backward()
        xp = array_module(logits)
        logits, targets = xp.asarray(logits), xp.asarray(targets)
        logits = real_input(logits, "`logits`")
        if logits.ndim != 2:
            raise ValueError(f"`logits` must have shape (B, K); got {tuple(logits.shape)}")
        batch, classes = logits.shape
        if batch == 0:
            raise ValueError(
                f"`logits` must hold at least one sample: the mean loss of an empty batch is undefined; "
                f"got shape {tuple(logits.shape)}"
            )
        if classes == 0:
            raise ValueError(f"`logits` must have at least one class (K >= 1); got shape {tuple(logits.shape)}")
        if targets.dtype.kind not in "iu":  # a ValueError, as it always was (callers catch that)
            raise ValueError(
                f"`targets` must be integer class indices in [0, {classes}); got {_show(targets)} "
                "(float or bool targets are not class indices)"
            )
        if targets.shape != (batch,):
            raise ValueError(
                f"`targets` must have one class index per row of `logits`, shape ({batch},); "
                f"got shape {tuple(targets.shape)}"
            )
        low, high = int(targets.min()), int(targets.max())
        if low < 0 or high >= classes:
            raise ValueError(f"`targets` must lie in [0, {classes}); got values from {low} to {high}")
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        rows = xp.arange(logits.shape[0])
        self._cache = (log_probs, targets, rows)
        return -log_probs[rows, targets].mean()

    def backward(self, grad_y: Any = 1.0) -> Any:
        """Gradient with respect to the logits (times ``grad_y``, the loss's own gradient)."""
        if self._cache is None:
            raise RuntimeError("CrossEntropyLoss.backward needs a forward pass first")
        log_probs, targets, rows = self._cache
        xp = array_module(log_probs)
        grad = xp.exp(log_probs)
        grad[rows, targets] -= 1
        return grad * log_probs.dtype.type(float(grad_y) / log_probs.shape[0])
