"""Background tasks on Temporal (``pip install runstream[temporal]``): see :mod:`.manager`."""

from runstream.tasks.temporal.manager import TemporalSettings, TemporalTaskManager

__all__ = ["TemporalSettings", "TemporalTaskManager"]
