"""Nothing a user could call before the restructure is lost: the package's public names and the CLI's commands."""

from __future__ import annotations

import subprocess
import sys

import pytest

import convsuite as cs

#: `convsuite.__all__` at tag notebook-2026-11-28, before the layered core and the moves.
NAMES_BEFORE = [
    "BackendInfo",
    "BackendUnavailableError",
    "Conv1D",
    "Conv2D",
    "ConvSpec",
    "Explanation",
    "Plan",
    "TuneResult",
    "UnsupportedCaseError",
    "__version__",
    "clear_plan_cache",
    "clear_tuning_cache",
    "conv1d",
    "conv1d_backward",
    "conv2d",
    "conv2d_backward",
    "explain",
    "get_backend",
    "get_num_threads",
    "get_precision",
    "list_backends",
    "nets",
    "nn",
    "plan",
    "register_backend",
    "set_autotune",
    "set_backend",
    "set_num_threads",
    "set_precision",
    "tune",
    "unregister_backend",
    "use_autotune",
    "use_backend",
    "use_precision",
]

COMMANDS_BEFORE = ["info", "compare", "sweep", "train"]


@pytest.mark.parametrize("name", NAMES_BEFORE)
def test_every_public_name_of_before_is_still_exported(name):
    assert name in cs.__all__ and getattr(cs, name) is not None


@pytest.mark.parametrize("command", COMMANDS_BEFORE + ["calibrate"])
def test_every_command_still_answers_its_help(command):
    done = subprocess.run(
        [sys.executable, "-m", "convsuite", command, "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"convsuite {command}" in done.stdout
