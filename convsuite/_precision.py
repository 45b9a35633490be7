"""The float32 precision policy: which algorithms ``auto`` may choose, in the shape of torch's.

Three classes, from the most accurate (as ``torch.set_float32_matmul_precision``):

``"highest"``
    IEEE float32 arithmetic: every product and sum in float32 (the SIMT
    kernels, cuBLAS SGEMM, every CPU backend). Errors against float64 are
    those of cuDNN with TF32 off.
``"high"``
    Error-compensated TF32 on the tensor cores (``tf32x3``): each float32
    operand split into two TF32 parts, three MMAs per product, each k-step's
    sum taken by the float32 accumulator with rounded adds. Not float32's
    rounding bit for bit, but as accurate: 0.3-0.8x cuDNN-FP32's error on the
    zoo's longest reductions (H200, docs/measurements/precision-tf32x3-2026-11-28-h200.md).
``"medium"``
    One TF32 MMA per product (10-bit mantissas, about 1e-3 relative), what
    torch gives for convolutions by default (``torch.backends.cudnn.allow_tf32``).

The policy bounds what ``algorithm="auto"``, the fitted rule and autotune may
pick: an algorithm whose class is less accurate than the policy is never
chosen for you. An algorithm named with ``algorithm=`` runs whatever the
policy (you asked for it). float64 problems are computed in float64 by every
algorithm that takes them; the policy concerns float32 (and float16, computed
in float32).

The default is ``"high"``: float32 accuracy as measured against cuDNN with
TF32 off (at or below its error on every layer measured), with the tensor
cores' speed; torch's own default for convolutions is one TF32 product
(``cudnn.allow_tf32``, about 1e-3). ``"highest"`` asks for IEEE float32
arithmetic itself (FMA reductions, as NumPy's and torch's matmul default),
for results comparable bit for bit in kind with other float32 code.
Precedence: the innermost :func:`use_precision`, then :func:`set_precision`,
then ``CONVSUITE_PRECISION``, then ``"high"``.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from . import _plan_cache
from ._environ import environment_reader

__all__ = [
    "ENV_VAR",
    "PRECISIONS",
    "admits",
    "check_precision",
    "get_precision",
    "set_precision",
    "use_precision",
]

#: The classes, most accurate first.
PRECISIONS = ("highest", "high", "medium")
ENV_VAR = "CONVSUITE_PRECISION"
DEFAULT = "high"

_RANK = {name: rank for rank, name in enumerate(PRECISIONS)}
_scoped: ContextVar[str | None] = ContextVar("convsuite_precision", default=None)
_global: str | None = None
_read_env = environment_reader(ENV_VAR)


def check_precision(value: object, where: str = "`precision`") -> str:
    """``value`` if it names a precision class, else a ValueError/TypeError saying what is accepted."""
    if not isinstance(value, str):
        raise TypeError(f"{where} must be one of {', '.join(map(repr, PRECISIONS))}; got {value!r}")
    if value not in _RANK:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, PRECISIONS))}; got {value!r}")
    return value


def get_precision() -> str:
    """The policy in force here: ``"highest"``, ``"high"`` or ``"medium"``."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    if _global is not None:
        return _global
    env = _read_env()
    if env is None or not env.strip():
        return DEFAULT
    return check_precision(env.strip(), f"the environment variable {ENV_VAR}")


def set_precision(precision: str | None) -> None:
    """Set the process-wide float32 precision policy (``None``: back to ``CONVSUITE_PRECISION`` or "high").

    Parameters
    ----------
    precision : {"highest", "high", "medium"} or None
        The least accurate class ``auto`` may choose; see the module doc.
    """
    global _global
    _global = None if precision is None else check_precision(precision)
    _plan_cache.invalidate()


@contextmanager
def use_precision(precision: str) -> Iterator[None]:
    """The float32 precision policy inside the ``with`` block (private to the thread or task).

    Parameters
    ----------
    precision : {"highest", "high", "medium"}
    """
    token = _scoped.set(check_precision(precision))
    try:
        yield
    finally:
        _scoped.reset(token)


def admits(policy: str, precision: str) -> bool:
    """Whether an algorithm of class ``precision`` may be chosen under ``policy``."""
    return _RANK[precision] <= _RANK[policy]
