"""Durable agent runs on Temporal (``pip install runstream[temporal]``): see :mod:`.runner`."""

from runstream.durable.runner import TemporalRuns

__all__ = ["TemporalRuns"]
