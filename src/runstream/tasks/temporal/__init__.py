"""Background tasks on Temporal (``pip install runstream[temporal]``): see :mod:`.manager`."""

from runstream.tasks.temporal.manager import TemporalTaskManager
from runstream.tasks.temporal.settings import TemporalSettings

__all__ = ["TemporalSettings", "TemporalTaskManager"]
