"""The build configuration: no setuptools warning, every file of the package shipped, one ruff version.

The wheel itself is built and read by tests/test_cuda_sources.py (the exhaustive tier); these checks read
the configuration, so they cost nothing in the fast tier.
"""

from __future__ import annotations

import fnmatch
import re
import sys
import warnings
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Build outputs that live beside the sources and are not part of the checkout.
BUILT = {".pyc", ".so", ".pyd"}


def _package_dir(package: str) -> Path:
    """The folder setuptools reads ``package`` from (``package-dir`` mappings first)."""
    mapped = PYPROJECT["tool"]["setuptools"].get("package-dir", {})
    if package in mapped:
        return ROOT / mapped[package]
    return ROOT.joinpath(*package.split("."))


def _source_files(folder: Path) -> list[Path]:
    """The checkout's files directly in ``folder``: build outputs and caches left out."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix not in BUILT)


def test_setuptools_reads_the_configuration_without_a_warning():
    setuptools = pytest.importorskip("setuptools", reason="the test extra brings setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecation (the license as a TOML table was one) fails here
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert Version(setuptools.__version__) >= Version("77")  # what the license expression needs
    assert dist.metadata.license_expression == "MIT"
    assert [ROOT / name for name in dist.metadata.license_files] == [ROOT / "LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_every_folder_of_the_package_is_listed_and_every_listed_one_exists():
    """A folder left out of ``packages`` is left out of the wheel (setuptools warns and drops its files)."""
    listed = PYPROJECT["tool"]["setuptools"]["packages"]
    for package in listed:
        assert _package_dir(package).is_dir(), f"{package} is listed but {_package_dir(package)} does not exist"
    on_disk = {
        ".".join(folder.relative_to(ROOT).parts)
        for folder in [ROOT / "convsuite", *(ROOT / "convsuite").rglob("*")]
        if folder.is_dir() and folder.name != "__pycache__" and _source_files(folder)
    }
    assert on_disk - set(listed) == set(), "folders of convsuite/ missing from [tool.setuptools] packages"


def test_every_file_of_every_package_ships():
    """Each file is a module, or matches the package's package-data patterns."""
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    for package in PYPROJECT["tool"]["setuptools"]["packages"]:
        for path in _source_files(_package_dir(package)):
            if path.suffix == ".py":
                continue
            patterns = data.get(package, [])
            assert any(fnmatch.fnmatch(path.name, p) for p in patterns), (
                f"{path.relative_to(ROOT)} is not shipped: no package-data pattern of {package} ({patterns}) matches"
            )


def test_the_pre_commit_hooks_run_the_ruff_that_pyproject_allows_on_what_make_lint_checks():
    yaml = pytest.importorskip("yaml", reason="the bench extra brings PyYAML")
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert set(hooks) == {"ruff-check", "ruff-format"}
    (allowed,) = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"] if r.startswith("ruff")]
    linted = re.search(r"^LINTED := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    for hook in hooks.values():
        (pin,) = hook["additional_dependencies"]
        pinned = Requirement(pin)
        (version,) = [spec.version for spec in pinned.specifier if spec.operator == "=="]
        assert pinned.name == "ruff" and allowed.specifier.contains(version), (pin, str(allowed))
        for target in linted:  # the folders and files of `make lint`, and only those
            assert re.search(hook["files"], target + ("/x.py" if (ROOT / target).is_dir() else ""))
        assert not re.search(hook["files"], "docs/conf.py")
    assert hooks["ruff-check"]["entry"].startswith("ruff check")
    assert hooks["ruff-format"]["entry"].startswith("ruff format --check")


def test_pytest_tiers_are_declared_and_no_per_test_skip_lines():
    options = PYPROJECT["tool"]["pytest"]["ini_options"]
    markers = {line.split(":")[0] for line in options["markers"]}
    assert {"gpu", "exhaustive"} <= markers
    assert "-ra" not in options.get("addopts", "")  # conftest prints one line summing up the skips
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: .*\n\t\$\(PYTEST\) -m \"not exhaustive\"$", makefile, re.M)
    assert re.search(r"^test-all: .*\n\t\$\(PYTEST\)$", makefile, re.M)
    assert re.search(r"^PYTEST := \$\(BIN\)/python -m pytest .*-n auto -p no:cacheprovider$", makefile, re.M)
