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
  and the Dockerfile (which ``test_dockerfile.py`` checks); ``python file.py`` runs a file an
  earlier block wrote; ``export`` sets the environment of the following commands (except provider
  keys, ``*_API_KEY``: the documents show placeholders), with ``DATABASE_URL``, ``REDIS_URL`` and
  ``TEMPORAL_ADDRESS`` pointing at the test services (a Temporal dev server is started for a
  document that names it);
* ``js``: run with node against the document's last server, with the interop tests' packages;
* ``text``: diagrams and sample output, not run; a ``text`` block the prose introduces with "It
  prints" is what the block before it prints;
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
from asyncio.subprocess import PIPE
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
OWN_HARNESS = {
    "docs/mcp.md": "tests/test_ecosystem_docs.py",
    "docs/ag-ui.md": "tests/test_ecosystem_docs.py",
    "docs/otel.md": "tests/test_ecosystem_docs.py",
    "docs/scale-out.md": "tests/temporal/test_scale_out_doc.py",
}
"""Documents whose blocks another test runs (they need an MCP client, an OTLP receiver, Temporal)."""
DOCS = [
    doc
    for doc in ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
    if doc not in OWN_HARNESS
]
NODE_MODULES = ROOT / "tests" / "js" / "node_modules"
CI = os.environ.get("CI") == "true"
RUN_TIMEOUT_S = 120

STARTS_STUDIO = "starts Mastra Studio with npx; tests/server/test_cli.py runs `runstream studio`"
NOT_RUN = {
    (
        "docs/studio.md",
        "runstream studio myapp:runtime          # same as: runstream serve myapp:runtime --studio",
    ): (STARTS_STUDIO),
    (
        "docs/studio.md",
        "npx mastra@1.31.0 studio --server-host 127.0.0.1 --server-port 4111 --server-api-prefix /api",
    ): ("a Node.js command; tests/server/test_studio_js.py runs this Studio against a server"),
    ("docs/server.md", 'import { useChat } from "@ai-sdk/react";'): (
        "a React hook, needs a browser app; tests/js/scripts/ui-chat.mjs drives the same route"
    ),
}

EXPECTED_OUTPUT = {
    ("README.md", "async def get_weather"): [
        '[tool-output] {"status":"looking it up"}',  # runstream.console's line
        '"type":"tool-result"',
        "It is 21C in Paris.",
    ],
    ("docs/background-tasks.md", "async def research"): [
        "background-task-started",
        "background-task-completed",
    ],
    ("docs/goals.md", "GoalConfig(judge=judge"): [
        "active - The haiku has no title",
        "done - A titled haiku.",
    ],
    ("docs/quickstart.md", "python quickstart.py"): ["Paris."],
    ("docs/server.md", 'client.getAgent("assistant")'): ["text-delta", "finish"],
    ("docs/server.md", 'getWorkflow("approve-post")'): ["workflow-step-suspended", "workflow-finish success"],
}
"""What a block must print, for blocks found by a piece of their code."""


@dataclass
class Block:
    lang: str
    code: str
    line: int
    prints: str | None = None
    """The ``text`` block that follows "It prints" in the prose after this block: its output."""

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0] if self.code else ""


def blocks_of(doc: str) -> list[Block]:
    text = (ROOT / doc).read_text()
    found = []
    previous_end = 0
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        block = Block(match.group(1), match.group(2), line)
        if found and block.lang == "text" and "It prints" in text[previous_end : match.start()]:
            found[-1].prints = block.code
        found.append(block)
        previous_end = match.end()
    return found


def test_every_document_has_been_found() -> None:
    assert {"README.md", "docs/server.md", "docs/testing.md", "docs/deployment.md"} <= set(DOCS)
    for doc in DOCS:
        for block in blocks_of(doc):
            assert block.lang, f"{doc}:{block.line}: a code block needs a language"
    for doc, harness in OWN_HARNESS.items():
        assert Path(doc).name in (ROOT / harness).read_text(), f"{harness} does not run {doc}"
    for doc, needle in [*EXPECTED_OUTPUT, *NOT_RUN]:
        assert any(needle in block.code for block in blocks_of(doc)), f"{doc}: no block with {needle!r}"


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
    is_file = re.fullmatch(r"# [\w/.-]+\.py", block.first_line) is not None
    if "DATABASE_URL" in block.code and not session.services and not is_file:
        return  # see services()
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
        out = check(session, block, [sys.executable, script.name], env={**session.env, **session.services})
        expect_output(session, block, out)
        return
    name = named.group(1)
    body = block.code.split("\n", 1)[1]
    if (ROOT / name).is_file():
        assert body == (ROOT / name).read_text(), f"{session.where(block)}: differs from {name}"
    target = session.cwd / Path(name).name
    target.write_text(body)
    if not target.name.startswith("test_"):  # test files run through the pytest command below them
        check(session, block, [sys.executable, "-c", f"import {target.stem}"])


def expect_output(session: Session, block: Block, out: str) -> None:
    if block.prints is not None:  # "It prints:" and the output, line by line (trailing spaces aside)
        printed, shown = (
            [line.rstrip() for line in text.strip().splitlines()] for text in (out, block.prints)
        )
        assert printed == shown, f"{session.where(block)}: printed\n{out}\nnot what the document shows"
    for (doc, needle), expected in EXPECTED_OUTPUT.items():
        if doc == session.doc and needle in block.code:
            missing = [text for text in expected if text not in out]
            assert not missing, f"{session.where(block)}: the output lacks {missing}:\n{out}"


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
            if not key.endswith("_API_KEY"):  # a placeholder key: the docs run on scripted models
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
        if argv[1] == "run" and "runstream" in argv:
            command = argv[argv.index("runstream") + 1 :]
            assert command[0] in ("serve", "worker") and command[1] == "app:api_runtime", (
                f"{where}: {command}"
            )
    elif argv[:2] == ["runstream", "worker"]:
        run_worker(session, argv)
    elif name in ("runstream", "uvicorn"):
        serve(session, block, argv)
    elif argv[:3] == ["python", "-m", "pytest"]:
        check(session, block, [sys.executable, *argv[1:]])
    elif name == "python" and argv[1].startswith("examples/"):
        check(session, block, [sys.executable, *argv[1:]], cwd=ROOT)
    elif name == "python" and (session.cwd / argv[1]).is_file():  # a file an earlier block wrote
        out = check(session, block, [sys.executable, *argv[1:]], env={**session.env, **session.services})
        expect_output(session, block, out)
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
    """``runstream worker``: started, ready (polling its Temporal task queues), stopped by SIGTERM."""
    with running(argv, session.cwd, session.env) as process:
        read_line_with(process, "runstream worker ready")
        stop_and_read(process)
    assert process.returncode == 0


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
    expect_output(session, block, out)


# -- services --------------------------------------------------------------------------------------


@contextmanager
def services(blocks: list[Block]) -> Iterator[dict[str, str]]:
    """A fresh PostgreSQL database (and the test Redis, and a Temporal dev server if the
    document names ``TEMPORAL_ADDRESS``) for a document that needs them."""
    if not any("DATABASE_URL" in block.code for block in blocks):
        yield {}
        return
    temporal = None
    if any("TEMPORAL_ADDRESS" in block.code for block in blocks):
        from runstream.tasks.temporal.devserver import TemporalDevServer

        temporal = TemporalDevServer().start()
    import asyncpg

    database = f"docs_{uuid.uuid4().hex[:12]}"

    async def admin(sql: str) -> None:
        connection = await asyncpg.connect(POSTGRES_URL)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    try:
        try:
            asyncio.run(admin(f"CREATE DATABASE {database}"))
        except (OSError, asyncpg.PostgresError):
            if CI:
                raise
            yield {}  # no PostgreSQL here: the blocks that need it are left out (never under CI)
            return
        urls = {"DATABASE_URL": POSTGRES_URL.rsplit("/", 1)[0] + f"/{database}", "REDIS_URL": REDIS_URL}
        if temporal is not None:
            urls["TEMPORAL_ADDRESS"] = temporal.address
        try:
            yield urls
        finally:
            asyncio.run(admin(f"DROP DATABASE {database} WITH (FORCE)"))
    finally:
        if temporal is not None:
            temporal.stop()


async def test_the_first_example_runs_on_a_real_provider_too(tmp_path: Path) -> None:
    """With OPENAI_API_KEY set, the README's first example talks to OpenAI's Responses API: here a
    loopback server replays recorded OpenAI streams (two get_weather calls, then an answer)."""
    pytest.importorskip("openai")
    from tests.providers.loopback import LoopbackServer, Reply, fixture

    [block] = [b for b in blocks_of("README.md") if "async def get_weather" in b.code]
    script = tmp_path / "first_agent.py"
    script.write_text(block.code)
    server = LoopbackServer()
    await server.start()
    server.queue(
        Reply(fixture("openai_responses_reasoning_tools.sse")), Reply(fixture("openai_responses_text.sse"))
    )
    env = clean_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=server.url("/v1"))
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, script.name, cwd=tmp_path, env=env, stdout=PIPE, stderr=PIPE
        )
        async with asyncio.timeout(RUN_TIMEOUT_S):
            out, err = await process.communicate()
    finally:
        await server.stop()
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert text.count("[tool-output] ") == 2 and '"tempC":21' in text  # the console renderer's lines
    assert "Hello world! See the docs." in text
    assert [r.path for r in server.requests] == ["/v1/responses", "/v1/responses"]
    assert server.requests[0].body["model"] == "gpt-4.1-mini"
