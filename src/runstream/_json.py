"""JSON as a type: what a chunk payload, a stored record or a wire body holds once decoded.

``JsonValue`` is the recursive union ``json.loads`` can return; ``JsonObject`` is a decoded JSON
object. Use them where a value is JSON whose shape runstream does not know (a user's metadata, a
vendor's extra fields) instead of ``dict[str, Any]``, and narrow with ``isinstance`` where code
reads into it. Where runstream knows the shape, write a ``TypedDict`` instead. ``JsonMapping`` is
the read-only form to accept as a parameter: ``Mapping`` is covariant, so a caller's
``dict[str, str]`` passes where ``dict[str, JsonValue]`` would not.

At runtime the recursive aliases are ``TypeAliasType``s, which pydantic resolves (a chunk payload
``TypedDict`` that uses them is validated at the wire boundary; a quoted alias sends pydantic into
endless recursion). Type checkers read the quoted aliases instead: pyright loses the recursion of
a ``TypeAliasType`` used through another alias (``JsonObject``). pydantic's own ``JsonValue`` is
declared the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

JsonScalar: TypeAlias = str | int | float | bool | None
if TYPE_CHECKING:
    JsonValue: TypeAlias = "JsonScalar | list[JsonValue] | dict[str, JsonValue]"
    JsonObject: TypeAlias = "dict[str, JsonValue]"
    JsonInput: TypeAlias = "JsonScalar | Sequence[JsonInput] | Mapping[str, JsonInput]"
    """What may be given where JSON is expected: any mapping or sequence of JSON values (read only)."""
    JsonMapping: TypeAlias = "Mapping[str, JsonInput]"
else:
    from typing_extensions import TypeAliasType

    JsonValue = TypeAliasType("JsonValue", "JsonScalar | list[JsonValue] | dict[str, JsonValue]")
    JsonObject = dict[str, JsonValue]
    JsonInput = TypeAliasType("JsonInput", "JsonScalar | Sequence[JsonInput] | Mapping[str, JsonInput]")
    JsonMapping = Mapping[str, JsonInput]
