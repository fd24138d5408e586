"""The Dockerfile, checked without Docker (there is no engine here).

Parsed instruction by instruction: the base image's Python satisfies ``requires-python``, every
``COPY`` source exists and is not excluded by ``.dockerignore``, the extras it installs exist,
it runs as an unprivileged user, and the ports agree. Then the image's own commands run: the
files are laid out as ``COPY`` lays them, the ``CMD`` serves the app and the ``HEALTHCHECK``
command passes against it.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.processes import clean_env, free_port, running, stop_and_read, wait_healthy, with_port

ROOT = Path(__file__).parent.parent
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
    "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            assert keyword in INSTRUCTIONS, f"unknown instruction {keyword}"
            found.append((keyword, rest.strip()))
    return found


def only(keyword: str) -> str:
    values = [rest for key, rest in instructions() if key == keyword]
    assert len(values) == 1, f"expected one {keyword}, got {values}"
    return values[0]


def exec_form(rest: str) -> list[str]:
    argv = json.loads(rest)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), rest
    return argv


def copies() -> list[tuple[list[str], str]]:
    return [
        (parts[:-1], parts[-1]) for key, rest in instructions() if key == "COPY" for parts in [rest.split()]
    ]


def ignored(path: str) -> bool:
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip()]
    return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") for p in patterns)


def test_the_base_image_has_a_supported_python() -> None:
    image = only("FROM")
    version = re.fullmatch(r"python:(\d+)\.(\d+)-slim", image)
    assert version, image
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = tuple(int(x) for x in required.removeprefix(">=").split("."))
    assert (int(version.group(1)), int(version.group(2))) >= minimum


def test_every_copied_file_is_in_the_build_context() -> None:
    assert copies(), "the image copies nothing"
    for sources, _ in copies():
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file"
            assert not ignored(source), f"COPY {source}: excluded by .dockerignore"
    assert ignored(".venv") and ignored(".git")


def test_the_installed_extras_exist() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    runs = [rest for key, rest in instructions() if key == "RUN" and "pip install" in rest]
    assert len(runs) == 1
    requested = re.search(r"'\.\[([\w,]+)\]'", runs[0])
    assert requested and set(requested.group(1).split(",")) <= extras


def test_it_runs_unprivileged_and_its_ports_agree() -> None:
    assert only("USER") not in ("root", "0")
    port = only("EXPOSE")
    cmd = exec_form(only("CMD"))
    assert cmd[cmd.index("--port") + 1] == port
    assert f"127.0.0.1:{port}/health" in only("HEALTHCHECK")


def test_the_image_commands_serve_the_app_and_pass_the_health_check(tmp_path: Path) -> None:
    """Lay out /app as the COPY lines do (the package itself is installed here already), then
    run the CMD and the HEALTHCHECK command, with the port moved to a free one."""
    workdir = only("WORKDIR")
    for sources, destination in copies():
        for source in sources:
            if source.startswith("examples/"):  # the app; src/ and pyproject.toml are installed here
                inside = (Path(workdir) / destination).relative_to(workdir)  # ./app.py or /app/app.py
                shutil.copy(ROOT / source, tmp_path / inside)
    assert (tmp_path / "app.py").is_file()
    port = free_port()
    cmd = with_port(exec_form(only("CMD")), port)
    env = clean_env(RUNSTREAM_SQLITE_PATH=str(tmp_path / "runstream.db"), RUNSTREAM_API_TOKEN="t0ken")
    with running(cmd, tmp_path, env) as process:
        assert wait_healthy(process, port).status_code == 200
        check = exec_form(only("HEALTHCHECK").split(" CMD ", 1)[1])
        check = [sys.executable if a == "python" else a.replace(":4111/", f":{port}/") for a in check]
        result = subprocess.run(check, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        _, err = stop_and_read(process)
    assert "WARNING" not in err, f"{shlex.join(cmd)} warned: {err}"
