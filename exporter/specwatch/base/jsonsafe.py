"""JSON has no NaN or infinity: the one place such values become null, like an absent gauge."""

from __future__ import annotations

import math
from collections.abc import Mapping


def json_safe(value: object) -> object:
    """`value` with every non-finite float (at any depth of dicts, lists and tuples) replaced by None;
    tuples become lists, as json.dumps would write them anyway."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def json_safe_record(record: Mapping[str, object]) -> dict[str, object]:
    """A flat or nested JSON object (a replay line, a status document) made JSON-safe."""
    return {key: json_safe(item) for key, item in record.items()}
