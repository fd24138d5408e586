"""A readable console rendering of a run's stream, on ``rich``.

``await render(out)`` prints a run as it streams: text as it arrives, reasoning dimmed, tool
calls, results and task lifecycle as compact one-line entries (long JSON truncated), tool errors
and ``error`` chunks in red, a rule before each until-idle continuation turn, and the usage at the
end. ``verbose=True`` also shows the chunks it otherwise hides (step boundaries, argument deltas,
...); ``json=True`` prints each chunk's wire JSON instead. Colours only go to a terminal: a
redirected or captured output gets plain text (``rich`` decides).

    out = await agent.stream("Weather in Paris?")
    await render(out)

``ConsoleRenderer`` is the same thing piece by piece, for a loop that does more with each chunk:
``renderer.chunk(c)`` for every chunk, then ``renderer.close()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from typing import Any

import orjson
from rich.console import Console
from rich.text import Text

from runstream.chunks import AnyChunk
from runstream.run.output import RunOutput

__all__ = ["ConsoleRenderer", "render"]

TEXT_STYLE = ""
REASONING_STYLE = "dim italic"
TOOL_STYLE = "bold cyan"
RESULT_STYLE = "green"
OUTPUT_STYLE = "cyan"
ERROR_STYLE = "bold red"
TASK_STYLE = "bold yellow"
QUIET_STYLE = "dim"

# Chunks that carry nothing a reader needs once the rest is shown (verbose=True shows them).
QUIET = frozenset(
    {
        "step-start",
        "step-finish",
        "text-start",
        "text-end",
        "reasoning-start",
        "reasoning-end",
        "reasoning-signature",
        "redacted-reasoning",
        "tool-call-input-streaming-start",
        "tool-call-input-streaming-end",
        "tool-call-delta",
        "response-metadata",
        "raw",
        "watch",
    }
)


def compact(value: object, limit: int) -> str:
    """``value`` as one line of compact JSON (plain strings as they are), cut at ``limit`` chars."""
    line = (
        value
        if isinstance(value, str)
        else orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    )
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: max(limit - 1, 0)] + "…"


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        name, message = error.get("name"), error.get("message")
        if message is not None:
            return f"{name}: {message}" if name and name != "Error" else str(message)
    return str(error)


class ConsoleRenderer:
    """Prints chunks readably on a ``rich`` console; one instance per rendered stream."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        verbose: bool = False,
        json: bool = False,
        max_value_chars: int = 100,
    ) -> None:
        self.console = console or Console()
        self.verbose = verbose
        self.json = json
        self.max_value_chars = max_value_chars
        self.turns = 0
        self.usage: dict[str, int] = {}
        self.finish_reason: str | None = None
        self._open: str | None = None  # the kind of delta whose line is still open

    # -- output helpers -------------------------------------------------------------------------
    def _close_line(self) -> None:
        if self._open is not None:
            self.console.print()
            self._open = None

    def _line(self, label: str, detail: str, style: str) -> None:
        self._close_line()
        text = Text(label, style=style)
        if detail:
            text.append(" " + detail, style=style if style != TOOL_STYLE else "cyan")
        self.console.print(text, soft_wrap=True)

    def _delta(self, kind: str, text: str, style: str, prefix: str = "") -> None:
        if self._open != kind:
            self._close_line()
            if prefix:
                self.console.print(Text(prefix, style=style), end="", soft_wrap=True)
            self._open = kind
        self.console.print(Text(text, style=style), end="", soft_wrap=True)

    def _v(self, value: Any) -> str:
        return compact(value, self.max_value_chars)

    # -- the chunks -------------------------------------------------------------------------------
    def chunk(self, chunk: AnyChunk) -> None:
        """Print one chunk (or add it to the current line)."""
        if self.json:
            self._close_line()
            self.console.print(chunk.to_json(), markup=False, highlight=False, soft_wrap=True)
            return
        kind = chunk.type
        payload: Mapping[str, object] = chunk.payload if isinstance(chunk.payload, dict) else {}
        if kind == "text-delta":
            self._delta(kind, str(payload.get("text", "")), TEXT_STYLE)
        elif kind == "reasoning-delta":
            self._delta(kind, str(payload.get("text", "")), REASONING_STYLE, prefix="thinking: ")
        elif kind == "start":
            self.turns += 1
            if self.turns > 1:
                self._close_line()
                self.console.rule(Text(f"continuation turn {self.turns - 1}", style=QUIET_STYLE))
            elif self.verbose:
                self._line("[start]", "", QUIET_STYLE)
        elif kind == "finish":
            self._finish(payload)
        elif kind == "tool-call":
            args = payload.get("args")
            self._line(f"[tool-call] {payload.get('toolName')}", f"{self._v(args)}", TOOL_STYLE)
        elif kind == "tool-result":
            self._line(
                f"[tool-result] {payload.get('toolName')}",
                f"-> {self._v(payload.get('result'))}",
                RESULT_STYLE,
            )
        elif kind == "tool-error":
            message = _error_message(payload.get("error"))
            self._line(f"[tool-error] {payload.get('toolName')}", self._v(message), ERROR_STYLE)
        elif kind == "tool-output":
            self._line("[tool-output]", self._v(payload.get("output")), OUTPUT_STYLE)
        elif kind in ("error", "abort", "tripwire"):
            detail = payload.get("error", payload.get("reason", payload))
            self._line(f"[{kind}]", self._v(_error_message(detail)), ERROR_STYLE)
        elif kind.startswith("background-task-"):
            self._task(kind, payload)
        elif kind in QUIET and not self.verbose:
            return
        else:
            detail = self._v(payload) if self.verbose else ""
            self._line(f"[{kind}]", detail, QUIET_STYLE)

    def _task(self, kind: str, payload: Mapping[str, object]) -> None:
        call_id = payload.get("toolCallId", "")
        if kind == "background-task-progress":
            running, elapsed = payload.get("runningCount"), payload.get("elapsedMs")
            detail = f"{running} running" + (
                f", {elapsed / 1000:.1f}s" if isinstance(elapsed, int | float) else ""
            )
        elif kind == "background-task-output":
            inner = payload.get("payload")
            output = inner.get("payload", {}).get("output", inner) if isinstance(inner, dict) else inner
            detail = f"{call_id}: {self._v(output)}"
        elif kind == "background-task-completed":
            detail = f"{call_id} -> {self._v(payload.get('result'))}"
        elif kind == "background-task-failed":
            self._line(
                f"[{kind}]", f"{call_id}: {self._v(_error_message(payload.get('error')))}", ERROR_STYLE
            )
            return
        else:
            name = payload.get("toolName")
            detail = f"{call_id} {name}" if name else str(call_id)
        self._line(f"[{kind}]", detail, TASK_STYLE)

    def _finish(self, payload: Mapping[str, object]) -> None:
        self._close_line()
        step = payload.get("stepResult")
        if isinstance(step, dict) and step.get("reason"):
            self.finish_reason = str(step["reason"])
        output = payload.get("output")
        usage = output.get("usage") if isinstance(output, dict) else None
        if isinstance(usage, dict):
            for key, value in usage.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    self.usage[key] = self.usage.get(key, 0) + value
        if self.verbose:
            self._line("[finish]", f"reason={self.finish_reason}", QUIET_STYLE)

    def close(self) -> None:
        """End the open line and print the finish reason and the usage summed over the turns."""
        self._close_line()
        if self.json:
            return
        parts = [f"finished: {self.finish_reason}"] if self.finish_reason else []
        names = {"inputTokens": "input", "outputTokens": "output", "totalTokens": "total"}
        tokens = [f"{label} {self.usage[key]}" for key, label in names.items() if key in self.usage]
        if tokens:
            parts.append("tokens: " + ", ".join(tokens))
        if parts:
            self.console.print(Text(" · ".join(parts), style=QUIET_STYLE))

    async def render(self, stream: RunOutput | AsyncIterable[AnyChunk]) -> None:
        """Print every chunk of ``stream`` (a run's output or any chunk iterable), then the summary."""
        chunks: AsyncIterable[AnyChunk] = stream.full_stream if isinstance(stream, RunOutput) else stream
        try:
            async for chunk in chunks:
                self.chunk(chunk)
        finally:
            self.close()


async def render(
    stream: RunOutput | AsyncIterable[AnyChunk],
    console: Console | None = None,
    *,
    verbose: bool = False,
    json: bool = False,
    max_value_chars: int = 100,
) -> None:
    """Print a run's chunks readably as they stream (see the module's description)."""
    renderer = ConsoleRenderer(console, verbose=verbose, json=json, max_value_chars=max_value_chars)
    await renderer.render(stream)
