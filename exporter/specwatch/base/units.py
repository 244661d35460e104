"""Durations and sizes as people write them: '500ms', '5s', '1m', '2h'; '16MiB', '500KB'.

One grammar for the config file, the environment, the CLI flags and the simulator's scenarios.
The regular expressions double as the JSON-schema patterns of the Helm chart, so the chart
accepts exactly what the program does.
"""

from __future__ import annotations

import math
import re

# A bare number (or a number without a unit) is seconds / bytes.
DURATION_PATTERN = r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$"
SIZE_PATTERN = r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$"

_DURATION_RE = re.compile(DURATION_PATTERN)
_SIZE_RE = re.compile(SIZE_PATTERN)
_SECONDS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_BYTES = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


class UnitError(ValueError):
    """A value that is not a valid duration or size; `key` names where it came from."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def parse_duration(value: object, key: str, *, allow_zero: bool = False) -> float:
    """'500ms' | '5s' | '1m' | '2h' | a number of seconds -> seconds (> 0, or >= 0 with allow_zero)."""
    if isinstance(value, bool):
        raise UnitError(key, f"expected a duration like 5s, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(str(value))
        if not match:
            raise UnitError(key, f"expected a duration like 500ms, 5s, 1m or 2h, got {value!r}")
        seconds = float(match.group(1)) * _SECONDS[match.group(2)]
    if not math.isfinite(seconds):
        raise UnitError(key, f"must be a finite duration, got {value!r}")
    if allow_zero and seconds < 0:
        raise UnitError(key, f"must be 0 or more, got {value!r}")
    if not allow_zero and not seconds > 0:
        raise UnitError(key, f"must be greater than 0, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Inverse of parse_duration for labels: 60 -> '1m', 300 -> '5m', 30 -> '30s', 0.5 -> '500ms'."""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and abs(seconds / size - round(seconds / size)) < 1e-9:
            return f"{round(seconds / size)}{unit}"
    return f"{round(seconds * 1000)}ms"


def parse_size(value: object, key: str) -> int:
    """'16MiB' | '500KB' | a number of bytes -> bytes > 0."""
    if isinstance(value, bool):
        raise UnitError(key, f"expected a size like 16MiB, got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.match(str(value))
        if not match:
            raise UnitError(key, f"expected a size like 16MiB or 500KB, got {value!r}")
        size = int(float(match.group(1)) * _BYTES[match.group(2)])
    if size <= 0:
        raise UnitError(key, f"must be greater than 0, got {value!r}")
    return size
