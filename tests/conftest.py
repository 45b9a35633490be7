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
