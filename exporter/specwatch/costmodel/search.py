"""Bisection over a monotone predicate: the one search the cost model (and its callers) use."""

from __future__ import annotations

from collections.abc import Callable


def last_true(predicate: Callable[[int], bool], lo: int, hi: int) -> int:
    """Largest integer n in [lo, hi) with ``predicate(n)``, given ``predicate(lo)``, not
    ``predicate(hi)`` and a predicate that is true up to some n and false after it."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if predicate(mid):
            lo = mid
        else:
            hi = mid
    return lo


def solve_increasing(
    f: Callable[[float], float], target: float, lo: float = 0.0, hi: float = 1.0, iterations: int = 60
) -> float:
    """x in [lo, hi] with f(x) = target for an increasing ``f`` (60 halvings: below 1e-18 of the range)."""
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
