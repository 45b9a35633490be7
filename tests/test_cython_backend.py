"""The cython backend is really compiled and really releases the GIL."""

from __future__ import annotations

import importlib.machinery
import os
import threading

import numpy as np
import pytest

import convsuite as cs

INFO = {b.name: b for b in cs.list_backends()}["cython"]
needs_cython = pytest.mark.skipif(not INFO.available, reason=f"cython unavailable: {INFO.reason}")


def test_extension_built_when_required():
    """`make` sets CONVSUITE_REQUIRE_EXTENSION=1: there a missing build is a failure, not a skip."""
    if os.environ.get("CONVSUITE_REQUIRE_EXTENSION") == "1":
        assert INFO.available, INFO.reason
    else:
        assert INFO.available or "pip install ." in INFO.reason


@needs_cython
def test_module_is_a_compiled_extension():
    from convsuite._cython import _conv_cy

    assert _conv_cy.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert type(_conv_cy.forward).__name__ in ("fused_cython_function", "cython_function_or_method")


@needs_cython
def test_kernels_release_the_gil():
    """While one thread runs a long kernel, another thread finishes several kernels.

    If the kernel held the GIL, the second thread could not start a single call
    until the first kernel returned.
    """
    rng = np.random.default_rng(0)
    big_x = rng.standard_normal((8, 16, 96, 96), dtype=np.float32)
    big_w = rng.standard_normal((32, 16, 5, 5), dtype=np.float32)
    small_x = rng.standard_normal((1, 1, 16, 16), dtype=np.float32)
    small_w = rng.standard_normal((1, 1, 3, 3), dtype=np.float32)
    cs.conv2d(small_x, small_w, backend="cython")  # load the module first
    started, done = threading.Event(), threading.Event()
    completed_meanwhile = []

    def long_call():
        started.set()
        cs.conv2d(big_x, big_w, backend="cython")
        done.set()

    def short_calls():
        started.wait()
        while not done.is_set():
            cs.conv2d(small_x, small_w, backend="cython")
            if not done.is_set():
                completed_meanwhile.append(1)

    threads = [threading.Thread(target=long_call), threading.Thread(target=short_calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(completed_meanwhile) >= 3, len(completed_meanwhile)
