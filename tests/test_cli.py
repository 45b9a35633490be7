"""The convsuite command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from convsuite import cli


def test_info_lists_backends_and_machine(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for fragment in ("CPU:", "GPU:", "numpy", "python", "versions:"):
        assert fragment in out


@pytest.mark.parametrize("argv", [[], ["nonsense"], ["compare", "--repeat", "x"], ["info", "--bogus"]])
def test_bad_arguments_exit_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_console_script_module_entry():
    result = subprocess.run([sys.executable, "-m", "convsuite.cli", "info"], capture_output=True, text=True)
    assert result.returncode == 0 and "backends" in result.stdout
