"""The agent and its parts: :class:`Agent` (``agent.py``), a run's options (``run_options.py``),
the runs waiting for a human or running durably, sub-agents as tools, until-idle streams and the
services a runtime hands an agent. It sits above the run (``runstream.run``), memory and
background tasks, and below workflows, the runtime and the server."""

from runstream.agent._sub_agent import AgentToolError
from runstream.agent._suspension import RunNotFoundError
from runstream.agent.agent import Agent
from runstream.agent.run_options import client_tool

__all__ = ["Agent", "AgentToolError", "RunNotFoundError", "client_tool"]
