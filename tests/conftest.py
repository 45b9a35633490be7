"""Fixtures shared by the suite: every registered backend, and output poisoning."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import convsuite
from convsuite.testing import poisoned_outputs

_COMMON = dict(
    deadline=None,  # first calls may JIT-compile (numba) or build modules (cupy)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# CI is deterministic (same examples every run); local runs explore new ones.
settings.register_profile("ci", derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("dev", **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

BACKENDS = {info.name: info for info in convsuite.list_backends()}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request) -> str:
    """Each registered backend by name; unavailable ones skip with their reason."""
    info = BACKENDS[request.param]
    if not info.available:
        pytest.skip(f"backend {info.name!r} unavailable: {info.reason}")
    return info.name


@pytest.fixture(autouse=True)
def _poison_outputs():
    """Every output buffer starts as NaN, so an unwritten element fails its check."""
    with poisoned_outputs():
        yield


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line for every skip, grouped by reason (what is missing on this machine), not one line each."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        # Group by what is missing: the text before the first detail in parentheses or after a colon.
        key = reason.split(" (")[0].split(": ", 1)[-1] if "unavailable" in reason else reason.split(" (")[0]
        reasons[key] = reasons.get(key, 0) + 1
    parts = [f"{count} {reason}" for reason, count in sorted(reasons.items(), key=lambda item: -item[1])]
    terminalreporter.write_line(f"skipped {len(skipped)}: " + "; ".join(parts))


#: The exhaustive tier: what `make test-all` adds to `make test`. Each entry is a test's node id (file::name)
#: and which of its parametrisations belong here; the fast tier keeps at least one case of every backend,
#: algorithm, option class and error path (the default configuration of each CUDA source, the first seed of
#: each random case, one corrupted-cache scenario per loader, the default parameters of every tunable).
_EXHAUSTIVE = {
    # every -D configuration of every source (the default one of each stays fast), and the wheel build
    "tests/test_cuda_sources.py::test_sources_compile_to_ptx": lambda case: not case.endswith("-]"),
    "tests/test_cuda_sources.py::test_sources_compile_for_the_oldest_gpu_cuda_13_targets": lambda case: True,
    "tests/test_cuda_sources.py::test_a_built_wheel_ships_every_source": lambda case: True,
    # the second random seed of the cross-backend agreement
    "tests/test_agreement.py::test_forward_matches_reference_random": lambda case: case.endswith("-2]"),
    "tests/test_agreement.py::test_backward_matches_reference_random": lambda case: case.endswith("-2]"),
    # every value of every CPU tunable (the defaults are checked by the agreement suite)
    "tests/test_cpu_tunables.py::test_every_configuration_agrees_with_the_reference": lambda case: True,
    # whole-command runs that time real work (the fast tier keeps the same paths on fake or small cases)
    "tests/test_compare_isolation.py::test_each_contender_inside_compare_runs_as_fast_as_in_a_process_of_its_own": (
        lambda case: True
    ),
    "tests/test_sweep.py::test_seed_report_on_the_fake_backend": lambda case: True,
    "tests/test_compare_scaling.py::test_compare_scaling_runs_joblib_and_dask_and_writes_the_table": lambda case: True,
    "tests/test_nets.py::test_mobilenet_small_input_matches_torchvision_on_every_backend": lambda case: (
        case == "[python]"
    ),
    # every corrupted-file scenario of numba's cache but one per file kind
    "tests/test_reliability_caches.py::test_a_broken_numba_cache_file_is_moved_aside_once_and_recompiled": (
        lambda case: case not in ("[index truncated]", "[code garbage]")
    ),
}


def pytest_configure(config):
    config.addinivalue_line("markers", "exhaustive: the exhaustive tier (make test-all); make test leaves it out")


def pytest_collection_modifyitems(config, items):
    """Mark the exhaustive tier's cases (see _EXHAUSTIVE) so that `-m "not exhaustive"` is the fast tier."""
    marker = pytest.mark.exhaustive
    for item in items:
        base, _, case = item.nodeid.partition("[")
        rule = _EXHAUSTIVE.get(base)
        if rule is not None and rule(f"[{case}" if case else ""):
            item.add_marker(marker)
