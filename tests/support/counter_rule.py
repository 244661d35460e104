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
    """The increase each poll adds (0 for the first); a restart resets the base to its value. A dip
    (a drop within noise) is held back: it adds 0 and the base stays; a second dip that has moved
    on from the held value went backwards for good and counts on from the held value."""
    out: list[float] = []
    base: float | None = None
    held: float | None = None
    for value in values:
        if base is None:
            out.append(0.0)
            base = value
        elif value >= base:
            out.append(value - base)
            base, held = value, None
        elif base - value <= noise(base, counts):
            if held is not None and value >= held:
                out.append(value - held)  # below the base twice, moving on: it went backwards
                base, held = value, None
            else:
                out.append(0.0)  # a dip: held back, the base stays
                held = value
        else:
            out.append(value)  # a restart from 0
            base, held = value, None
    return out
