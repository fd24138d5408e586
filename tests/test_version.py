"""``runstream.__version__`` and ``runstream --version`` name the installed package's version
(issue 26); test_wheel.py checks the command in a wheel installed outside the repository."""

from __future__ import annotations

from importlib.metadata import version

import pytest

import runstream
from runstream.cli import main


def test_the_version_is_the_installed_packages() -> None:
    assert runstream.__version__ == version("runstream") != "0+unknown"


def test_the_command_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"runstream {runstream.__version__}\n"
