"""Build script for the compiled parts of convsuite.

Everything declarative lives in pyproject.toml; this file only lists the
Cython extension. If the extension cannot be compiled the install still
succeeds (the ``cython`` backend then reports "extension not built" with the
compiler's error), unless CONVSUITE_REQUIRE_EXTENSION=1, which the Makefile
and CI set so that a broken kernel fails loudly. The build is portable unless
CONVSUITE_NATIVE_BUILD=1 (see ``cpu_target_flags``).
"""

import os
import platform
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent
REQUIRE = os.environ.get("CONVSUITE_REQUIRE_EXTENSION", "") == "1"


class OptionalBuildExt(build_ext):
    """build_ext that downgrades a compile failure to a warning unless required."""

    def run(self):
        """Build the extensions; a failure is a warning unless the extension is required."""
        try:
            super().run()
        except Exception as exc:  # no compiler, no Cython: install the rest
            self._fail(exc)

    def build_extension(self, ext):
        """Build one extension; a failure is a warning unless the extension is required."""
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc):
        if REQUIRE:
            raise
        sys.stderr.write(
            f"WARNING: convsuite's Cython extension was not built ({exc}); the 'cython' backend will be unavailable.\n"
        )


def cpu_target_flags():
    """Compiler flags that choose the instruction set the extension may use.

    Portable by default: a wheel built here must run on any x86-64 (or
    aarch64) machine, so no -march and only the architecture's baseline
    (SSE2 on x86-64) is assumed; gcc still vectorises the contiguous inner
    loops at -O3, 128 bits wide. CONVSUITE_NATIVE_BUILD=1 targets the
    building machine (-march=native, 256-bit vectors on x86-64): faster
    there, an illegal instruction on an older CPU. The Makefile's dev install
    opts in; docs/measurements/build-target-*.md says what it buys.
    """
    if os.environ.get("CONVSUITE_NATIVE_BUILD", "") != "1":
        return []
    flags = ["-march=native"]
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags.append("-mprefer-vector-width=256")
    return flags


def extensions():
    """The Cython extensions to build, or none when there are no sources or no Cython."""
    sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "cython_src").glob("_*_cy.pyx"))
    if not sources:
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if REQUIRE:
            raise
        sys.stderr.write("WARNING: Cython not found; the 'cython' backend will be unavailable.\n")
        return []
    flags = ["-O3"] + cpu_target_flags()
    flags += os.environ.get("CONVSUITE_CFLAGS", "").split()
    mods = [Extension(f"convsuite._cython.{Path(s).stem}", [s], extra_compile_args=flags) for s in sources]
    return cythonize(
        mods,
        language_level=3,
        include_path=["cython_src"],
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
