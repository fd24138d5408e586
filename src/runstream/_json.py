"""JSON as a type: what a chunk payload, a stored record or a wire body holds once decoded.

``JsonValue`` is the recursive union ``json.loads`` can return; ``JsonObject`` is a decoded JSON
object. Use them where a value is JSON whose shape runstream does not know (a user's metadata, a
vendor's extra fields) instead of ``dict[str, Any]``, and narrow with ``isinstance`` where code
reads into it. Where runstream knows the shape, write a ``TypedDict`` instead. ``JsonMapping`` is
the read-only form to accept as a parameter: ``Mapping`` is covariant, so a caller's
``dict[str, str]`` passes where ``dict[str, JsonValue]`` would not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = "JsonScalar | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"
JsonMapping: TypeAlias = "Mapping[str, JsonInput]"
JsonInput: TypeAlias = "JsonScalar | Sequence[JsonInput] | Mapping[str, JsonInput]"
"""What may be given where JSON is expected: any mapping or sequence of JSON values (read only)."""
