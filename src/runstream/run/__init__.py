"""One run of the agentic loop, below the agent: the run as data (``_run_state.py``), the loop
(``_loop.py``) and its model and tool steps, the step records, and :class:`RunOutput`
(``output.py``), the run's one driver. It knows chunks, tools, models and memory (as a type),
never background tasks, the agent, workflows or the server; users reach it through
``runstream`` and ``runstream.run.output``."""
