"""The wheel works outside the repository (issue 26): built as ``make dist`` builds it (the sdist,
then the wheel from the sdist), installed into a fresh venv with uv (the local wheel plus
dependencies from uv's cache, so it works offline once ``make`` has run; with the index as a
fallback), and the README's first example runs there."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UV = shutil.which("uv") or str(Path(sys.executable).parent / "uv")


def first_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Your first agent") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def run(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    }
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def test_the_wheel_installs_in_a_fresh_venv_and_runs_the_quick_start(tmp_path: Path) -> None:
    if not Path(UV).exists():
        pytest.fail("uv is needed (make installs it into .venv)")
    # As `make dist` builds: the sdist, and the wheel built from it (so the sdist holds it all).
    built = run(UV, "build", "-q", "--out-dir", str(tmp_path / "dist"), str(ROOT), cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    [_sdist] = (tmp_path / "dist").glob("runstream-*.tar.gz")
    [wheel] = (tmp_path / "dist").glob("runstream-*.whl")
    venv = tmp_path / "venv"
    made = run(UV, "venv", "-q", "--python", sys.executable, str(venv), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    install = [UV, "pip", "install", "-q", "--python", python, str(wheel)]
    done = run(*install, "--offline", cwd=tmp_path)
    if done.returncode != 0:  # a dependency not in uv's cache yet
        done = run(*install, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    script = tmp_path / "first_agent.py"
    script.write_text(first_example())
    out = run(python, script.name, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "It is 21C in Paris." in out.stdout
    version = run(str(venv / "bin" / "runstream"), "--version", cwd=tmp_path)
    assert version.stdout.strip().startswith("runstream ") and "unknown" not in version.stdout
