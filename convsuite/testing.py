"""An independent float64 reference and the tolerances results are held to.

The reference shares no code with any backend. It forms exactly the sums of
the definition on the zero-padded input, ``y[o] = sum_k x_padded[o*stride +
k*dilation] * w[k]``: one strided slab of the padded input per kernel tap,
multiplied and summed by ``numpy.einsum`` in float64 (its own loops, never
BLAS). No zeros are inserted between dilated taps or stride-spread gradient
samples, so a NaN or an infinity meets only the products the definition
forms and propagates as it does in PyTorch: ``inf * 0`` at a padding tap is
NaN (a padding tap is a product like any other), while a sample that a
dilated kernel or a stride skips contributes nothing. Gradients are the same
sums taken the other way round (``grad_w[k] = sum_o grad_y[o] *
x_padded[o*stride + k*dilation]``, ``grad_x`` scattered tap by tap).

Tolerances are the classical worst-case bound of a floating-point sum of
``n`` products, whatever the summation order: ``|fl(s) - s| <= n * eps *
sum|terms|``. ``sum|terms|`` is the same reference computed on absolute
values, so the bound is per element and exact zeros must stay exact.

Every function checks what it is given: ``spec`` must be a consistent
:class:`~convsuite._spec.ConvSpec`, operands must have a shape the library
accepts for that spec and real (integer or floating) values; anything else is
a ``TypeError`` or ``ValueError`` that names the operand, rather than a
reference silently computed on misread data.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
from numpy.typing import ArrayLike

from ._buffers import poisoned_outputs
from ._spec import ConvSpec

__all__ = [
    "PRECISION_CLASS_BOUNDS",
    "assert_precision_class",
    "poisoned_outputs",
    "precision_bound",
    "relative_l2_error",
    "reference_forward",
    "reference_backward",
    "forward_tolerance",
    "backward_tolerances",
    "assert_within",
]


# --- checking what the caller passed ---------------------------------------


def _check_spec(spec: Any, where: str) -> None:
    """Raise unless ``spec`` is a ConvSpec whose geometry is self-consistent."""
    if not isinstance(spec, ConvSpec):
        raise TypeError(
            f"{where}: `spec` must be a convsuite ConvSpec (for example "
            f"`convsuite.explain(x, w, ...).spec` or `convsuite.plan(...).spec`); got {type(spec).__name__}"
        )
    try:
        problem = _geometry_problem(spec)
    except (TypeError, ValueError) as exc:  # fields of the wrong kind (an int stride, a list, a short pair)
        problem = f"its fields are not of the kinds a ConvSpec holds ({exc})"
    if problem:
        raise ValueError(f"{where}: `spec` is inconsistent: {problem}; got {spec}")


def _geometry_problem(spec: ConvSpec) -> str:
    """Why the spec's fields cannot describe one convolution, or ``""``.

    Recomputed here rather than trusted: a spec edited with
    ``dataclasses.replace`` (a smaller batch, another input size) must still
    say how many outputs there are, or the reference would read off its end.
    """
    if spec.ndim not in (1, 2):
        return f"ndim must be 1 or 2, not {spec.ndim}"
    per_axis = (spec.in_size, spec.kernel_size, spec.stride, spec.dilation, spec.padding, spec.out_size)
    if any(len(field) != spec.ndim for field in per_axis):
        return f"in_size, kernel_size, stride, dilation, padding and out_size must have {spec.ndim} entries each"
    counts = (spec.batch, spec.in_channels, spec.out_channels, spec.groups)
    if min(counts + spec.in_size + spec.kernel_size + spec.stride + spec.dilation) < 1:
        return "batch, channels, groups, in_size, kernel_size, stride and dilation must all be >= 1"
    if min(side for pair in spec.padding for side in pair) < 0:
        return "padding must be >= 0 on every side"
    if spec.in_channels % spec.groups or spec.out_channels % spec.groups:
        return f"groups={spec.groups} must divide in_channels={spec.in_channels} and out_channels={spec.out_channels}"
    expected = tuple(
        max((n + before + after - (d * (k - 1) + 1)) // s + 1, 0)
        for n, k, s, d, (before, after) in zip(spec.in_size, spec.kernel_size, spec.stride, spec.dilation, spec.padding)
    )
    if expected != tuple(spec.out_size):
        return f"its geometry gives out_size {expected}, but out_size is {tuple(spec.out_size)}"
    return ""


def _real_array(value: Any, name: str, where: str) -> np.ndarray:
    """``value`` as a float64 array; complex, bool and non-numeric data are refused.

    Not ``_validation.as_real_array``: the oracle reads host arrays only (a
    CuPy array there would be taken as it is) and must take empty ones
    (``assert_within`` of an empty result).
    """
    if isinstance(value, np.ma.MaskedArray):
        # np.asarray drops the mask and lets the masked values in unseen.
        raise TypeError(f"{where}: `{name}` is a masked array; pass `{name}.filled(0)` or `{name}.data`")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError, BufferError) as exc:
        # ragged lists, device arrays (CuPy), torch tensors that require grad
        raise TypeError(
            f"{where}: `{name}` must be a NumPy array or array-like of real numbers on the host "
            f"(call `.get()` on a CuPy array); got {type(value).__name__} ({exc})"
        ) from None
    if array.dtype.kind not in "iuf":
        # Complex would lose its imaginary part in the float64 conversion;
        # bool, strings and objects are not values a convolution multiplies.
        raise TypeError(
            f"{where}: `{name}` must have a real numeric dtype (floating or integer); got dtype {array.dtype}"
        )
    return array.astype(np.float64, copy=False)


def _shapes(canonical: tuple[int, ...], leading_units: int) -> list[tuple[int, ...]]:
    """``canonical`` and the shapes without up to ``leading_units`` of its leading axes, where those are 1."""
    shapes = [tuple(canonical)]
    for drop in range(1, leading_units + 1):
        if canonical[drop - 1] != 1:
            break
        shapes.append(tuple(canonical[drop:]))
    return shapes


def _operand(value: Any, name: str, accepted: list[tuple[int, ...]], where: str) -> np.ndarray:
    """``value`` as float64 in the first (canonical) of the ``accepted`` shapes, or raise naming it."""
    array = _real_array(value, name, where)
    if array.shape not in accepted:
        others = " or ".join(map(str, accepted[1:]))
        alternatives = f" (or, as the library accepts it, {others})" if others else ""
        raise ValueError(f"{where}: `{name}` must have shape {accepted[0]}{alternatives}; got shape {array.shape}")
    return array.reshape(accepted[0])


def _x_operand(spec: ConvSpec, x: Any, where: str) -> np.ndarray:
    """The input as float64 ``spec.x_shape``; also accepted without the batch axis, or as a plain signal/image."""
    return _operand(x, "x", _shapes(spec.x_shape, 2), where)


def _w_operand(spec: ConvSpec, w: Any, where: str) -> np.ndarray:
    """The weights as float64 ``spec.w_shape``; a plain ``kernel_size`` mask too when ``M == C/groups == 1``."""
    accepted = [spec.w_shape]
    if spec.out_channels == spec.channels_per_group == 1:
        accepted.append(tuple(spec.kernel_size))
    return _operand(w, "w", accepted, where)


def _bias_operand(spec: ConvSpec, bias: Any, where: str) -> np.ndarray | None:
    """The bias as float64 ``(M,)``; a shorter one would broadcast over every channel, so it is refused."""
    if bias is None:
        return None
    return _operand(bias, "bias", [(spec.out_channels,)], where)


def _grad_y_operand(spec: ConvSpec, grad_y: Any, where: str) -> np.ndarray:
    """The output gradient as float64 ``spec.y_shape``, in any layout the forward output could have had."""
    return _operand(grad_y, "grad_y", _shapes(spec.y_shape, 2), where)


# --- the sums of the definition ---------------------------------------------


def _grouped(array: np.ndarray, groups: int, axis: int) -> np.ndarray:
    """Split ``axis`` into ``(groups, size // groups)`` (a view)."""
    shape = array.shape
    return array.reshape(shape[:axis] + (groups, shape[axis] // groups) + shape[axis + 1 :])


def _padded(s: ConvSpec, x4: np.ndarray) -> np.ndarray:
    """The zero-padded input of the 2-D view, channels split into groups: ``(B, G, C/G, Hp, Wp)``."""
    (pt, pb), (pl, pr) = s.padding
    return _grouped(np.pad(x4, ((0, 0), (0, 0), (pt, pb), (pl, pr))), s.groups, 1)


def _slab(s: ConvSpec, p: int, q: int) -> tuple:
    """Index of the padded-input samples tap ``(p, q)`` reads, one per output, in output order.

    Output ``(oh, ow)`` reads row ``oh*sh + p*dh`` and column ``ow*sw + q*dw``:
    a strided slice, so only samples a tap really reads are ever touched.
    """
    (sh, sw), (dh, dw) = s.stride, s.dilation
    Ho, Wo = s.out_size
    rows = slice(p * dh, p * dh + (Ho - 1) * sh + 1, sh)
    cols = slice(q * dw, q * dw + (Wo - 1) * sw + 1, sw)
    return (Ellipsis, rows, cols)


def _taps(s: ConvSpec) -> Iterator[tuple[int, int]]:
    """Every kernel tap ``(p, q)`` of the 2-D view."""
    KH, KW = s.kernel_size
    return ((p, q) for p in range(KH) for q in range(KW))


def _forward(s: ConvSpec, x4: np.ndarray, w4: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``conv(x, w) + bias`` on the 2-D view, float64, shape ``s.y_shape``."""
    xg = _padded(s, x4)  # (B, G, Cg, Hp, Wp)
    wg = _grouped(w4, s.groups, 0)  # (G, Mg, Cg, KH, KW)
    y = np.zeros((s.batch, s.groups, s.out_channels_per_group, *s.out_size))
    # IEEE specials are the point here (inf * 0 at a padding tap is NaN): no warnings.
    with np.errstate(invalid="ignore", over="ignore"):
        for p, q in _taps(s):
            y += np.einsum("bgchw,gmc->bgmhw", xg[_slab(s, p, q)], wg[..., p, q])
        y = y.reshape(s.y_shape)
        if bias is not None:
            y += bias[None, :, None, None]
    return y


def _backward(s: ConvSpec, g4: np.ndarray, x4: np.ndarray, w4: np.ndarray) -> tuple:
    """``(grad_x, grad_w, grad_b)`` on the 2-D view, float64, canonical 2-D shapes."""
    xg = _padded(s, x4)  # (B, G, Cg, Hp, Wp)
    wg = _grouped(w4, s.groups, 0)  # (G, Mg, Cg, KH, KW)
    gg = _grouped(g4, s.groups, 1)  # (B, G, Mg, Ho, Wo)
    grad_xp = np.zeros(xg.shape)
    grad_w = np.empty(wg.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        for p, q in _taps(s):
            slab = _slab(s, p, q)
            # grad_w[k] = sum_o grad_y[o] * x_padded[o*s + k*d]: padding samples included.
            grad_w[..., p, q] = np.einsum("bgmhw,bgchw->gmc", gg, xg[slab])
            # grad_x[i] = sum over (o, k) with o*s + k*d = i: within one tap the
            # slab's samples are distinct, so the in-place add is race-free.
            grad_xp[slab] += np.einsum("bgmhw,gmc->bgchw", gg, wg[..., p, q])
        grad_b = g4.sum(axis=(0, 2, 3))
    (pt, _), (pl, _) = s.padding
    H, W = s.in_size
    # Products landing on padding positions belong to no input: cropped away.
    grad_x = grad_xp.reshape(s.batch, s.in_channels, *grad_xp.shape[3:])[:, :, pt : pt + H, pl : pl + W]
    return grad_x, grad_w.reshape(s.w_shape), grad_b


def _forward_operands(spec: Any, x: Any, w: Any, bias: Any, where: str) -> tuple:
    """Checked ``(2-D view of spec, x4, w4, bias)`` in float64."""
    _check_spec(spec, where)
    s = spec.as_2d()
    x4 = _x_operand(spec, x, where).reshape(s.x_shape)
    w4 = _w_operand(spec, w, where).reshape(s.w_shape)
    return s, x4, w4, _bias_operand(spec, bias, where)


def _backward_operands(spec: Any, grad_y: Any, x: Any, w: Any, where: str) -> tuple:
    """Checked ``(2-D view of spec, g4, x4, w4)`` in float64."""
    s, x4, w4, _ = _forward_operands(spec, x, w, None, where)
    g4 = _grad_y_operand(spec, grad_y, where).reshape(s.y_shape)
    return s, g4, x4, w4


def _canonical_grads(spec: ConvSpec, grads: tuple) -> tuple:
    """The 2-D view's gradients in the spec's own canonical shapes."""
    grad_x, grad_w, grad_b = grads
    return grad_x.reshape(spec.x_shape), grad_w.reshape(spec.w_shape), grad_b


# --- public API ---------------------------------------------------------------


def reference_forward(spec: ConvSpec, x: ArrayLike, w: ArrayLike, bias: ArrayLike | None = None) -> np.ndarray:
    """The float64 forward pass ``conv(x, w) + bias``, computed from the definition.

    Parameters
    ----------
    spec : ConvSpec
        The problem (``convsuite.explain(...).spec``, ``convsuite.plan(...).spec``).
        Its ``has_bias`` and ``dtype`` are not consulted: ``bias`` says whether
        a bias is added, and the result is always float64.
    x : array_like
        Input of shape ``spec.x_shape``; also accepted in the library's other
        layouts of the same data: without the batch axis when ``B == 1``, or
        the plain ``in_size`` signal/image when ``B == C == 1``.
    w : array_like
        Weights of shape ``spec.w_shape``, or the plain ``kernel_size`` mask
        when ``M == C/groups == 1``.
    bias : array_like, optional
        Shape ``(M,)``.

    Returns
    -------
    numpy.ndarray
        float64 array of shape ``spec.y_shape``.

    Raises
    ------
    TypeError
        If ``spec`` is not a ConvSpec, or an operand is complex, bool or not
        numeric.
    ValueError
        If ``spec`` is inconsistent or an operand has another shape.

    Notes
    -----
    Only the products of the definition are formed, so NaN and infinities
    propagate as in PyTorch: a padding tap multiplies a zero (``inf * 0`` is
    NaN there), samples between dilated taps are never read.
    """
    s, x4, w4, b = _forward_operands(spec, x, w, bias, "reference_forward")
    return _forward(s, x4, w4, b).reshape(spec.y_shape)


def reference_backward(
    spec: ConvSpec, grad_y: ArrayLike, x: ArrayLike, w: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The float64 gradients ``(grad_x, grad_w, grad_b)``, computed from the definition.

    Parameters
    ----------
    spec : ConvSpec
        The forward problem.
    grad_y : array_like
        Gradient of the output, shape ``spec.y_shape`` or the layout the
        forward output had (without the batch axis when ``B == 1``; the plain
        ``out_size`` when ``B == M == 1``).
    x, w : array_like
        The forward operands, in the shapes :func:`reference_forward` accepts.

    Returns
    -------
    tuple of numpy.ndarray
        float64 ``grad_x`` of shape ``spec.x_shape``, ``grad_w`` of shape
        ``spec.w_shape`` and ``grad_b`` of shape ``(M,)``.

    Raises
    ------
    TypeError
        If ``spec`` is not a ConvSpec, or an operand is complex, bool or not
        numeric.
    ValueError
        If ``spec`` is inconsistent or an operand has another shape.

    Notes
    -----
    ``grad_w`` includes the padding taps' products (``inf * 0`` is NaN there);
    ``grad_x`` sums only the ``(output, tap)`` pairs that read each input, so
    an output gradient never meets a weight that a stride skips.
    """
    s, g4, x4, w4 = _backward_operands(spec, grad_y, x, w, "reference_backward")
    return _canonical_grads(spec, _backward(s, g4, x4, w4))


def _eps(spec: ConvSpec, where: str) -> float:
    """Machine epsilon of the spec's compute dtype."""
    try:
        dtype = np.dtype(spec.dtype)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind != "f":
        raise ValueError(f"{where}: `spec.dtype` must be a floating dtype ('float32' or 'float64'); got {spec.dtype!r}")
    return float(np.finfo(dtype).eps)


def forward_tolerance(spec: ConvSpec, x: ArrayLike, w: ArrayLike, bias: ArrayLike | None = None) -> np.ndarray:
    """Per-element bound on the forward error of a ``spec.dtype`` computation.

    Parameters
    ----------
    spec : ConvSpec
        The problem; ``spec.dtype`` gives the machine epsilon.
    x, w, bias : array_like
        The operands, in the shapes :func:`reference_forward` accepts.

    Returns
    -------
    numpy.ndarray
        float64 array of shape ``spec.y_shape``: ``(n + 1) * eps * (|x| * |w|
        + |bias|)``, with ``n = C/groups * prod(kernel_size)`` and the
        product a convolution, plus the smallest normal number so that a
        zero bound is never exactly zero. Where a NaN or an infinity reaches
        an output the bound is not finite either: zero such operands first
        to bound the finite outputs.

    Raises
    ------
    TypeError, ValueError
        As :func:`reference_forward`.
    """
    where = "forward_tolerance"
    s, x4, w4, b = _forward_operands(spec, x, w, bias, where)
    eps = _eps(spec, where)
    magnitude = _forward(s, np.abs(x4), np.abs(w4), None if b is None else np.abs(b))
    n = spec.reduction_length + 1
    return (n * eps * magnitude + np.finfo(np.float64).tiny).reshape(spec.y_shape)


def backward_tolerances(
    spec: ConvSpec, grad_y: ArrayLike, x: ArrayLike, w: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-element bounds for ``(grad_x, grad_w, grad_b)`` built the same way.

    Parameters
    ----------
    spec : ConvSpec
        The forward problem; ``spec.dtype`` gives the machine epsilon.
    grad_y, x, w : array_like
        The operands, in the shapes :func:`reference_backward` accepts.

    Returns
    -------
    tuple of numpy.ndarray
        float64 bounds in the shapes :func:`reference_backward` returns. The
        reduction lengths are ``(M/g) * prod(K)`` for grad_x and ``B *
        prod(out_size)`` for grad_w and grad_b.

    Raises
    ------
    TypeError, ValueError
        As :func:`reference_backward`.
    """
    where = "backward_tolerances"
    s, g4, x4, w4 = _backward_operands(spec, grad_y, x, w, where)
    eps = _eps(spec, where)
    mags = _canonical_grads(spec, _backward(s, np.abs(g4), np.abs(x4), np.abs(w4)))
    tiny = np.finfo(np.float64).tiny
    n_x = spec.out_channels_per_group * int(np.prod(spec.kernel_size)) + 1
    n_w = spec.batch * int(np.prod(spec.out_size)) + 1
    return (n_x * eps * mags[0] + tiny, n_w * eps * mags[1] + tiny, n_w * eps * mags[2] + tiny)


def _tolerance_array(tolerance: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``tolerance`` (scalar or array) broadcast to ``shape``; negative bounds are refused."""
    tol = _real_array(tolerance, "tolerance", "assert_within")
    try:
        tol = np.broadcast_to(tol, shape)
    except ValueError:
        raise ValueError(
            f"assert_within: `tolerance` must be a scalar or an array that broadcasts to the "
            f"result's shape {shape}; got shape {tol.shape}"
        ) from None
    if (tol < 0).any():  # NaN compares False: a NaN bound fails where it is used, below
        raise ValueError(f"assert_within: `tolerance` must be >= 0 everywhere; got {float(tol[tol < 0].min())}")
    return tol


def _mismatches(actual: np.ndarray, expected: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """Where ``actual`` fails: finite pairs beyond ``tol``, non-finite values that differ."""
    with np.errstate(invalid="ignore", over="ignore"):
        within = np.abs(actual - expected) <= tol  # NaN (a NaN bound, inf - inf) compares False
    both_finite = np.isfinite(actual) & np.isfinite(expected)
    same_special = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    return ~np.where(both_finite, within, same_special)


def assert_within(actual: ArrayLike, expected: ArrayLike, tolerance: ArrayLike, name: str = "result") -> None:
    """Raise AssertionError unless ``actual`` matches ``expected`` within ``tolerance``.

    Parameters
    ----------
    actual, expected : array_like
        Real arrays of the same shape (no broadcasting: a result of another
        shape is a failure). Lists and other array-likes are read as arrays.
    tolerance : float or array_like
        Non-negative absolute bound on ``|actual - expected|``, a scalar or an
        array that broadcasts to the shape, as :func:`forward_tolerance` and
        :func:`backward_tolerances` return.
    name : str, optional
        What is checked, for the message.

    Raises
    ------
    AssertionError
        If the shapes differ, or any element is out of tolerance.
    TypeError
        If an argument is complex, bool or not numeric.
    ValueError
        If ``tolerance`` does not broadcast to the shape or is negative.

    Notes
    -----
    Finite elements must satisfy ``|actual - expected| <= tolerance`` (a NaN
    tolerance there fails). Non-finite elements must be identical, whatever
    the tolerance: ``+inf`` where ``+inf``, ``-inf`` where ``-inf``, NaN where
    NaN. So a NaN in ``actual`` where the reference has a number (an element
    the backend never wrote, with outputs poisoned by :func:`poisoned_outputs`)
    fails, and NaN in both passes: with non-finite inputs the reference is NaN
    exactly where the definition's products are.
    """
    actual = _real_array(actual, "actual", "assert_within")
    expected = _real_array(expected, "expected", "assert_within")
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {actual.shape} != expected shape {expected.shape}")
    tol = _tolerance_array(tolerance, actual.shape)
    bad = _mismatches(actual, expected, tol)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        got, want, bound = (float(a[index]) for a in (actual, expected, tol))
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {actual.size} elements out of tolerance; first at "
            f"{index}: got {got!r}, expected {want!r}, tolerance {bound:.3g}"
        )


#: What each float32 precision class (:mod:`convsuite._precision`) may reach, as the relative L2
#: error of a result against float64 on random normal operands: ``(a * sqrt(n) + b) * u`` with
#: ``n`` the reduction length and ``u = 2**-24`` (float32's unit roundoff), plus ``c`` for classes
#: whose products are not exact. A float32 sum of ``n`` random-sign products errs by about
#: ``u * sqrt(n)`` times a constant below one (cuDNN-FP32: 0.27-0.30 on reductions of 2048-4608,
#: H200), and the result's own rounding adds about ``u``. 'highest' allows ``1.0 * u * sqrt(n)``
#: (3x that), 'high' twice it: error-compensated TF32 carries ~2^-21 per product, but only a
#: rounded accumulation keeps it in this class (a truncating one, 5-8x, does not). 'medium' is one
#: TF32 product: its operands alone carry 2^-11 each.
PRECISION_CLASS_BOUNDS = {
    "highest": (1.0, 1.0, 0.0),
    "high": (2.0, 1.0, 0.0),
    "medium": (2.0, 1.0, 2.0**-10),
}


def relative_l2_error(actual: ArrayLike, expected: ArrayLike) -> float:
    """``||actual - expected|| / ||expected||`` in float64 (the norm of the difference if expected is 0).

    Parameters
    ----------
    actual, expected : array_like
        Real arrays of the same shape, finite.

    Returns
    -------
    float
    """
    actual = _real_array(actual, "actual", "relative_l2_error").astype(np.float64)
    expected = _real_array(expected, "expected", "relative_l2_error").astype(np.float64)
    if actual.shape != expected.shape:
        raise ValueError(f"relative_l2_error: shapes differ: {actual.shape} and {expected.shape}")
    if not (np.isfinite(actual).all() and np.isfinite(expected).all()):
        raise ValueError("relative_l2_error: the arrays must be finite (compare specials with assert_within)")
    norm = float(np.linalg.norm(expected))
    difference = float(np.linalg.norm(actual - expected))
    return difference / norm if norm else difference


def precision_bound(reduction_length: int, precision: str) -> float:
    """The relative L2 error a result of ``precision`` class may reach on a reduction of that length.

    Parameters
    ----------
    reduction_length : int
        Products summed per output (``spec.reduction_length`` forward; see :func:`backward_tolerances`
        for the gradients' lengths).
    precision : {"highest", "high", "medium"}

    Returns
    -------
    float
        See :data:`PRECISION_CLASS_BOUNDS`.
    """
    if precision not in PRECISION_CLASS_BOUNDS:
        raise ValueError(
            f"`precision` must be one of {', '.join(map(repr, PRECISION_CLASS_BOUNDS))}; got {precision!r}"
        )
    if (
        isinstance(reduction_length, bool)
        or not isinstance(reduction_length, (int, np.integer))
        or reduction_length < 1
    ):
        raise ValueError(f"`reduction_length` must be an int >= 1; got {reduction_length!r}")
    a, b, c = PRECISION_CLASS_BOUNDS[precision]
    return (a * float(np.sqrt(reduction_length)) + b) * 2.0**-24 + c


def assert_precision_class(
    actual: ArrayLike, expected: ArrayLike, reduction_length: int, precision: str, name: str = "result"
) -> None:
    """Raise AssertionError when ``actual`` errs beyond what its precision class allows.

    Parameters
    ----------
    actual, expected : array_like
        A float32 computation's result and its float64 reference, finite.
    reduction_length : int
        Products summed per output.
    precision : {"highest", "high", "medium"}
        The class the computation claims.
    name : str, optional
        What is checked, for the message.

    Raises
    ------
    AssertionError
        The relative L2 error passes :func:`precision_bound`.
    """
    error = relative_l2_error(actual, expected)
    bound = precision_bound(reduction_length, precision)
    if not error <= bound:
        raise AssertionError(
            f"{name}: relative L2 error {error:.3g} exceeds the {precision!r} class's {bound:.3g} "
            f"on a reduction of {reduction_length} ({error / bound:.1f}x its bound)"
        )
