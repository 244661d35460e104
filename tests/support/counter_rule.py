"""The counter rule of docs/architecture.md §3 written out on its own, for tests that check the
windows against it: per poll, the increase of one series that has no `_created`.

Prometheus's rule (a value below its predecessor restarted from 0, so the value is the increase),
except that a drop within measurement noise (0.1 % of the value, at least one count) is a dip: it adds
0 and the highest value seen stays the base, so the recovery above it is counted once."""

from __future__ import annotations

from collections.abc import Iterable


def noise(base: float, counts: bool = True) -> float:
    return max(1e-3 * base, 1.0 if counts else 0.0)


def poll_increases(values: Iterable[float], counts: bool = True) -> list[float]:
    """The increase each poll adds (0 for the first); a restart resets the base to its value."""
    out: list[float] = []
    base: float | None = None
    for value in values:
        if base is None:
            out.append(0.0)
            base = value
        elif value >= base:
            out.append(value - base)
            base = value
        elif base - value <= noise(base, counts):
            out.append(0.0)  # a dip: no restart, the base stays
        else:
            out.append(value)  # a restart from 0
            base = value
    return out
