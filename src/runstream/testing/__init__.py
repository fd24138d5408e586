"""Deterministic test doubles: :class:`ScriptedModel` plays scripted provider stream parts."""

from runstream.testing.scripted import RecordedCall, ScriptedError, ScriptedModel

__all__ = ["RecordedCall", "ScriptedError", "ScriptedModel"]
