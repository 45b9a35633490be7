"""``import convsuite`` shortens OpenBLAS's idle spin only when it can, and never overrides the user."""

import os
import subprocess
import sys

import pytest

_PRINT = "import os; {pre}import convsuite; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"


def _run(pre: str = "", env_value: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if env_value is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = env_value
    done = subprocess.run(
        [sys.executable, "-c", _PRINT.format(pre=pre)], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_set_before_numpy_loads():
    from convsuite._blas_spin import SPIN_LOG2_CYCLES

    assert _run() == SPIN_LOG2_CYCLES


def test_user_value_kept():
    assert _run(env_value="28") == "28"


def test_nothing_changed_once_numpy_is_loaded():
    # OpenBLAS has read its environment already: setting it now would only mislead.
    assert _run(pre="import numpy; ") == "None"


@pytest.mark.parametrize("value", ["4", "16"])
def test_openblas_accepts_the_setting(value):
    # NumPy's OpenBLAS loads and computes with the setting in place.
    code = "import convsuite, numpy as np; a = np.ones((300, 300)); print(float((a @ a)[0, 0]))"
    env = {**os.environ, "OPENBLAS_THREAD_TIMEOUT": value}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "300.0"


_STATE = "import os; {pre}import convsuite._blas_spin as b; print(b.numpy_blas_spins_long())"


@pytest.mark.parametrize(
    ("pre", "env_value", "long"),
    [
        ("", None, "False"),  # set here, before NumPy loads
        ("import numpy; ", None, "True"),  # NumPy loaded with OpenBLAS's default spin
        ("import numpy; ", "4", "False"),  # the user's own short setting
        ("", "28", "True"),
        ("", "0", "True"),  # OpenBLAS reads 0 as "keep the default"
        ("", "often", "True"),
    ],
)
def test_spin_state_is_recorded(pre, env_value, long):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if env_value is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = env_value
    done = subprocess.run(
        [sys.executable, "-c", _STATE.format(pre=pre)], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == long


_LINEAR_THREADS = """
import numpy as np
import convsuite
from convsuite.nn import layers
from threadpoolctl import threadpool_info
def numpy_blas_threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]
with layers._products(np.ones(3)):
    inside = numpy_blas_threads()
print(inside, numpy_blas_threads())
"""


def test_nn_products_run_on_one_blas_thread_while_the_spin_is_long():
    # NumPy imported first (the usual script): the layers' products wake no OpenBLAS worker.
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_NUM_THREADS")}
    env["OMP_NUM_THREADS"] = "2"
    done = subprocess.run([sys.executable, "-c", _LINEAR_THREADS], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[1] [2]"
