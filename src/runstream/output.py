"""A run's result: :class:`RunOutput` (its chunk stream, text stream and awaitable aggregates),
as ``agent.stream()`` returns it. It lives with the run (``runstream.run.output``); this is its
public import path."""

from runstream.run._sources import Observer
from runstream.run.output import Aggregate, FullOutput, RunOutput, StepRecord

__all__ = ["Aggregate", "FullOutput", "Observer", "RunOutput", "StepRecord"]
