"""Every code block of README.md and docs/ runs as written.

Each document's blocks run in order in one fresh directory (holding a link to ``examples/``, as
a clone's root does), with no provider keys in the environment (the examples then use their
scripted models):

* ``python``: run as a script; a block whose first line is ``# name.py`` is a file the following
  blocks use (written there and imported; when the name is a file of this repository, the block
  must be that file's exact text);
* ``sh``: each command runs, or is checked where running it here would make no sense: servers and
  workers are started, checked (``/health``, their ready line) and stopped; ``make`` targets,
  ``pip install`` extras and ``docker`` commands are checked against the Makefile, pyproject.toml
  and the Dockerfile (which ``test_dockerfile.py`` checks); ``export`` sets the environment of
  the following commands, with ``DATABASE_URL`` and ``REDIS_URL`` pointing at the test services;
* ``js``: run with node against the document's last server, with the interop tests' packages;
* ``text``: diagrams and sample output, not run;
* blocks that cannot run here are listed in :data:`NOT_RUN` with the reason.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.processes import (
    clean_env,
    free_port,
    read_line_with,
    running,
    stop_and_read,
    wait_healthy,
    with_port,
)

ROOT = Path(__file__).parent.parent
OWN_HARNESS = {"mcp.md", "ag-ui.md", "otel.md"}
"""Pages whose blocks tests/test_ecosystem_docs.py runs (free ports, its own MCP/OTLP counterparts)."""
DOCS = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md") if p.name not in OWN_HARNESS),
]
NODE_MODULES = ROOT / "tests" / "js" / "node_modules"
CI = os.environ.get("CI") == "true"
RUN_TIMEOUT_S = 120

NOT_RUN = {
    ("docs/server.md", 'const workflow = client.getWorkflow("approve-post");'): (
        "a fragment against a server with an approval workflow; tests/js/scripts/workflow.mjs runs it"
    ),
    ("docs/server.md", 'import { useChat } from "@ai-sdk/react";'): (
        "a React hook, needs a browser app; tests/js/scripts/ui-chat.mjs drives the same route"
    ),
}


@dataclass
class Block:
    lang: str
    code: str
    line: int

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0] if self.code else ""


def blocks_of(doc: str) -> list[Block]:
    text = (ROOT / doc).read_text()
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(match.group(1), match.group(2), line))
    return found


def test_every_document_has_been_found() -> None:
    assert {"README.md", "docs/server.md", "docs/testing.md", "docs/deployment.md"} <= set(DOCS)
    for doc in DOCS:
        for block in blocks_of(doc):
            assert block.lang, f"{doc}:{block.line}: a code block needs a language"


@dataclass
class Session:
    """One document's run: its directory, environment and the last server command."""

    doc: str
    cwd: Path
    env: dict[str, str]
    services: dict[str, str] = field(default_factory=dict)
    """``DATABASE_URL`` and ``REDIS_URL`` of the test services: Python blocks read them, and an
    ``export`` of either points there."""
    server: list[str] | None = None

    def where(self, block: Block) -> str:
        return f"{self.doc}:{block.line}"


@pytest.mark.parametrize("doc", DOCS)
def test_code_blocks_run_as_written(doc: str, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # docs run as from a clone's root
    with services(blocks_of(doc)) as urls:
        session = Session(doc, tmp_path, clean_env(RUNSTREAM_SQLITE_PATH="runstream.db"), urls)
        for block in blocks_of(doc):
            reason = NOT_RUN.get((doc, block.first_line))
            if reason is not None:
                continue
            run_block(session, block)


def run_block(session: Session, block: Block) -> None:
    if block.lang == "python":
        run_python(session, block)
    elif block.lang == "sh":
        for argv in commands(block.code):
            run_command(session, block, argv)
    elif block.lang == "js":
        run_js(session, block)
    elif block.lang != "text":  # text blocks are diagrams and sample output
        raise AssertionError(
            f"{session.where(block)}: no runner for {block.lang!r} blocks; add one or NOT_RUN"
        )


# -- python ----------------------------------------------------------------------------------------


def run_python(session: Session, block: Block) -> None:
    named = re.fullmatch(r"# ([\w/.-]+\.py)", block.first_line)
    if named is None:
        script = session.cwd / f"block_{block.line}.py"
        script.write_text(block.code)
        check(session, block, [sys.executable, script.name], env={**session.env, **session.services})
        return
    name = named.group(1)
    body = block.code.split("\n", 1)[1]
    if (ROOT / name).is_file():
        assert body == (ROOT / name).read_text(), f"{session.where(block)}: differs from {name}"
    target = session.cwd / Path(name).name
    target.write_text(body)
    if not target.name.startswith("test_"):  # test files run through the pytest command below them
        check(session, block, [sys.executable, "-c", f"import {target.stem}"])


def check(
    session: Session,
    block: Block,
    argv: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    result = subprocess.run(
        argv,
        cwd=cwd or session.cwd,
        env=env or session.env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, (
        f"{session.where(block)}: {shlex.join(argv)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


# -- sh --------------------------------------------------------------------------------------------


def commands(code: str) -> Iterator[list[str]]:
    for line in code.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            yield argv


def run_command(session: Session, block: Block, argv: list[str]) -> None:
    where = session.where(block)
    name = argv[0]
    if name == "export":
        for assignment in argv[1:]:
            key, _, value = assignment.partition("=")
            session.env[key] = session.services.get(key, value)
    elif name == "make":
        assert all(re.search(rf"^{t}:", MAKEFILE, re.M) for t in argv[1:]), (
            f"{where}: no make target {argv[1:]}"
        )
    elif argv[:4] in (["python3", "-m", "pip", "install"], ["python", "-m", "pip", "install"]) or argv[
        :2
    ] == [
        "pip",
        "install",
    ]:
        check_extras(where, argv)
    elif name == "docker":
        assert (ROOT / "Dockerfile").is_file(), f"{where}: no Dockerfile"
        if argv[1] == "run" and "python" in argv:
            assert argv[argv.index("python") + 1 :] == ["app.py", "worker"], f"{where}: unknown command"
    elif name in ("runstream", "uvicorn"):
        serve(session, block, argv)
    elif argv[:2] == ["python", "app.py"]:
        run_worker(session, argv)
    elif argv[:3] == ["python", "-m", "pytest"]:
        check(session, block, [sys.executable, *argv[1:]])
    elif name == "python" and argv[1].startswith("examples/"):
        check(session, block, [sys.executable, *argv[1:]], cwd=ROOT)
    else:
        raise AssertionError(f"{where}: no runner for the command {shlex.join(argv)}")


MAKEFILE = (ROOT / "Makefile").read_text()
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def check_extras(where: str, argv: list[str]) -> None:
    for arg in argv:
        requested = re.fullmatch(r"\.\[([\w,]+)\]", arg)
        if requested:
            unknown = set(requested.group(1).split(",")) - EXTRAS
            assert not unknown, f"{where}: no extra {unknown} in pyproject.toml"


def serve(session: Session, block: Block, argv: list[str]) -> None:
    """Start the server, check ``/health`` and the startup message, stop it."""
    port = free_port()
    with running(with_port(argv, port), session.cwd, session.env) as process:
        health = wait_healthy(process, port)
        assert health.status_code == 200, f"{session.where(block)}: /health said {health.text}"
        _, err = stop_and_read(process)
    if argv[0] == "runstream":
        assert f"playground at http://127.0.0.1:{port}/playground" in err
        if "RUNSTREAM_API_TOKEN" in session.env:
            assert "WARNING" not in err, err
        session.server = argv


def run_worker(session: Session, argv: list[str]) -> None:
    with running(argv, session.cwd, session.env) as process:
        read_line_with(process, "runstream worker: ready")
        out, _ = stop_and_read(process)
    assert "runstream worker: stopped" in out and process.returncode == 0


# -- js --------------------------------------------------------------------------------------------


def run_js(session: Session, block: Block) -> None:
    """Run the block with node against the document's last server command."""
    if not NODE_MODULES.is_dir():
        if CI:
            raise AssertionError("tests/js/node_modules is missing: run sh tests/js/setup.sh")
        return  # without the interop packages the JavaScript blocks cannot run here
    assert session.server is not None, f"{session.where(block)}: no server command before this block"
    named = re.fullmatch(r"// ([\w.-]+\.mjs).*", block.first_line)
    script = session.cwd / (named.group(1) if named else f"block_{block.line}.mjs")
    script.write_text(block.code)
    link = session.cwd / "node_modules"
    if not link.exists():
        link.symlink_to(NODE_MODULES)
    port = free_port()
    with running(with_port(session.server, port), session.cwd, session.env) as process:
        wait_healthy(process, port)
        env = {**session.env, "RUNSTREAM_URL": f"http://127.0.0.1:{port}"}
        out = check(session, block, ["node", script.name], env=env)
    assert out.strip(), f"{session.where(block)}: printed nothing"


# -- services --------------------------------------------------------------------------------------


@contextmanager
def services(blocks: list[Block]) -> Iterator[dict[str, str]]:
    """A fresh PostgreSQL database (and the test Redis) for a document that needs them."""
    if not any("DATABASE_URL" in block.code for block in blocks):
        yield {}
        return
    import asyncpg

    database = f"docs_{uuid.uuid4().hex[:12]}"

    async def admin(sql: str) -> None:
        connection = await asyncpg.connect(POSTGRES_URL)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    try:
        asyncio.run(admin(f"CREATE DATABASE {database}"))
    except (OSError, asyncpg.PostgresError) as exc:
        if CI:
            raise
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_URL}: {exc}")
    try:
        yield {"DATABASE_URL": POSTGRES_URL.rsplit("/", 1)[0] + f"/{database}", "REDIS_URL": REDIS_URL}
    finally:
        asyncio.run(admin(f"DROP DATABASE {database} WITH (FORCE)"))
