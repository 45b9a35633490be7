"""Extreme geometry (values near 2**31, 2**32, 2**62, 2**63): shared by the property tests.

Every backend must either agree exactly with the ``python`` backend (inputs are
small integers, so every sum is exact in float64) or raise the documented
error: ``ValueError`` from validation (naming the parameter), ``MemoryError``
for an output that cannot fit, or ``UnsupportedCaseError`` from a GPU backend's
``can_run`` (CPU backends decline nothing that validation accepts). Run as
``python -m tests._extreme_geometry EXAMPLES BACKEND...`` it checks the named
backends in this process, so that a test can run the compiled ones in a
subprocess: a crash then fails that test instead of killing pytest.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import convsuite as cs
from convsuite import UnsupportedCaseError
from convsuite._validation import prepare_forward

#: Values around the limits of int32, uint32, the validation bound and int64.
EXTREMES = [2**k + d for k in (31, 32, 62, 63) for d in (-1, 0, 1)] + [2**64, 3 * 2**61]
CPU_BACKENDS = ("python", "numpy", "cython", "numba")
#: Outputs above this many elements are not run (validation alone is checked).
MAX_OUTPUTS = 4096

small_or_extreme = st.one_of(st.integers(1, 3), st.sampled_from(EXTREMES))
padding_side = st.one_of(st.integers(0, 2), st.sampled_from(EXTREMES))


@st.composite
def extreme_cases(draw):
    """A small problem whose stride, dilation and padding may be extreme."""
    ndim = draw(st.sampled_from([1, 2]))
    in_size = tuple(draw(st.integers(1, 6)) for _ in range(ndim))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    groups = draw(st.sampled_from([1, 2]))
    channels = groups * draw(st.integers(1, 2))
    out_channels = groups * draw(st.integers(1, 2))
    keywords = dict(
        stride=tuple(draw(small_or_extreme) for _ in range(ndim)),
        dilation=tuple(draw(small_or_extreme) for _ in range(ndim)),
        groups=groups,
    )
    mode = draw(st.sampled_from(["pairs", "pairs", "same", "full", "valid"]))
    if mode == "pairs":
        keywords["padding"] = tuple((draw(padding_side), draw(padding_side)) for _ in range(ndim))
    else:
        keywords["padding"] = mode
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.integers(-3, 4, size=(draw(st.integers(1, 2)), channels, *in_size)).astype(np.float64)
    w = rng.integers(-3, 4, size=(out_channels, channels // groups, *kernel)).astype(np.float64)
    return ndim, x, w, keywords


def _outcome(function, *args, **keywords):
    """The result, or the class and message of a documented error."""
    try:
        return function(*args, **keywords)
    except (ValueError, MemoryError, UnsupportedCaseError) as exc:
        return exc


def check_case(case, backends) -> None:
    """Each backend agrees exactly with the python backend or raises a documented error."""
    ndim, x, w, keywords = case
    forward = cs.conv1d if ndim == 1 else cs.conv2d
    backward = cs.conv1d_backward if ndim == 1 else cs.conv2d_backward
    try:
        spec = prepare_forward(f"conv{ndim}d", ndim, x, w, None, convert=False, **keywords).spec
    except (ValueError, MemoryError) as exc:
        # Validation refused: it must name what it refused, and say so on every backend.
        assert any(name in str(exc) for name in ("stride", "dilation", "padding", "kernel", "output")), exc
        for backend in backends:
            other = _outcome(forward, x, w, backend=backend, **keywords)
            assert type(other) is type(exc) and str(other) == str(exc), (backend, other, exc)
        return
    assume(math.prod(spec.y_shape) <= MAX_OUTPUTS)
    expected = forward(x, w, backend="python", **keywords)
    grad_y = np.random.default_rng(1).integers(-3, 4, size=expected.shape).astype(np.float64)
    expected_grads = backward(grad_y, x, w, backend="python", **keywords)
    for backend in backends:
        # The CPU backends decline nothing validation accepts (numpy computes
        # huge padding tap by tap); a GPU backend may decline with its reason.
        got = _outcome(forward, x, w, backend=backend, **keywords)
        if isinstance(got, UnsupportedCaseError) and backend not in CPU_BACKENDS:
            continue
        assert not isinstance(got, Exception), (backend, keywords, got)
        np.testing.assert_array_equal(got, expected, err_msg=f"{backend} forward {keywords}")
        grads = _outcome(backward, grad_y, x, w, backend=backend, **keywords)
        if isinstance(grads, UnsupportedCaseError) and backend not in CPU_BACKENDS:
            continue
        assert not isinstance(grads, Exception), (backend, keywords, grads)
        for name, g, e in zip(("grad_x", "grad_w", "grad_b"), grads, expected_grads):
            np.testing.assert_array_equal(g, e, err_msg=f"{backend} {name} {keywords}")
        if backend in CPU_BACKENDS:
            check_named_algorithms(backend, forward, backward, x, w, grad_y, keywords, expected, expected_grads)


def check_named_algorithms(backend, forward, backward, x, w, grad_y, keywords, expected, expected_grads) -> None:
    """Each named algorithm of a CPU backend agrees or declines with its reason: autotune times them all.

    A numba algorithm sized a buffer by ``(tile_w - 1) * stride`` in int64, which wrapped near a width
    stride of 2**54 into a small buffer and an out-of-bounds write; ``auto`` never picked it, the tuner did.
    """
    for algorithm in cs.get_backend(backend).algorithms:
        got = _outcome(forward, x, w, backend=backend, algorithm=algorithm, **keywords)
        if isinstance(got, UnsupportedCaseError):
            assert algorithm in str(got), got
        else:
            assert not isinstance(got, Exception), (backend, algorithm, keywords, got)
            np.testing.assert_array_equal(got, expected, err_msg=f"{backend}/{algorithm} forward {keywords}")
        grads = _outcome(backward, grad_y, x, w, backend=backend, algorithm=algorithm, **keywords)
        if isinstance(grads, UnsupportedCaseError):
            continue
        assert not isinstance(grads, Exception), (backend, algorithm, keywords, grads)
        for name, g, e in zip(("grad_x", "grad_w", "grad_b"), grads, expected_grads):
            np.testing.assert_array_equal(g, e, err_msg=f"{backend}/{algorithm} {name} {keywords}")


def main(backends, examples: int) -> None:
    """Check ``backends`` on ``examples`` drawn cases in this process (derandomised)."""

    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(extreme_cases())
    def run(case):
        check_case(case, backends)

    run()
    print(f"ok: {examples} extreme-geometry cases on {', '.join(backends)}")


if __name__ == "__main__":
    main(sys.argv[2:], int(sys.argv[1]))
