"""Conformance runner: ``python -m runstream.conformance SCENARIO.json`` prints its chunk stream."""

from runstream.conformance.runner import ScenarioRunner, UnsupportedScenario

__all__ = ["ScenarioRunner", "UnsupportedScenario"]
