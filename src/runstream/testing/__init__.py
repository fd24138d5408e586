"""Test doubles for agents: scripted models that need no network and no API key.

``ScriptedModel.turns(...)`` scripts a conversation turn by turn with the items below;
``FunctionModel(respond)`` computes each turn from what the model was sent; ``ScriptedModel``
itself also plays raw provider stream parts (the conformance scenario format).
``HashEmbedder`` is a deterministic local embedder (no weights) for semantic recall and RAG.
"""

from runstream.testing.embedders import HashEmbedder
from runstream.testing.scripted import RecordedCall, ScriptedError, ScriptedModel
from runstream.testing.turns import (
    CallError,
    Delay,
    Finish,
    FunctionModel,
    ModelCall,
    Reasoning,
    StreamError,
    Text,
    ToolCall,
    Turn,
)

__all__ = [
    "CallError",
    "Delay",
    "Finish",
    "FunctionModel",
    "HashEmbedder",
    "ModelCall",
    "Reasoning",
    "RecordedCall",
    "ScriptedError",
    "ScriptedModel",
    "StreamError",
    "Text",
    "ToolCall",
    "Turn",
]
