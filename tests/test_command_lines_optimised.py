"""Every command line of the package starts under ``python -OO``, which strips docstrings.

The parsers took their description from the module docstring (``__doc__``),
which is None under -OO: ``python -OO -m convsuite --help`` raised
AttributeError before printing anything.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import convsuite
import convsuite.bench

ROOT = Path(convsuite.__file__).resolve().parent


def command_line_modules() -> list[str]:
    """``convsuite``'s own ``-m`` entry and every module of the package that runs as a script."""
    names = ["convsuite"]
    for package in (convsuite, convsuite.bench):
        for info in pkgutil.iter_modules(package.__path__, prefix=package.__name__ + "."):
            path = Path(package.__path__[0]) / (info.name.rsplit(".", 1)[1] + ".py")
            if path.is_file() and '__name__ == "__main__"' in path.read_text():
                names.append(info.name)
    return names


def test_every_command_line_prints_its_help_without_docstrings():
    modules = command_line_modules()
    assert "convsuite.bench.crossover" in modules and "convsuite.cli" in modules
    script = (
        "import runpy, sys\n"
        "failed = []\n"
        f"for name in {modules!r}:\n"
        "    sys.argv = [name, '--help']\n"
        "    try:\n"
        "        runpy.run_module(name, run_name='__main__', alter_sys=True)\n"
        "    except SystemExit as exc:\n"
        "        if exc.code not in (0, None):\n"
        "            failed.append((name, f'exit {exc.code}'))\n"
        "    except Exception as exc:\n"
        "        failed.append((name, repr(exc)))\n"
        "    else:\n"
        "        failed.append((name, 'no --help (ran to the end)'))\n"
        "print('FAILED', failed)\n"
    )
    run = subprocess.run(
        [sys.executable, "-OO", "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT.parent
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "FAILED []" in run.stdout, run.stdout[-3000:]
