"""One log line per state change, not one per poll: the sidecar's target, schema and verdict lines.

A poll loop that logged every tick would bury the one line that matters (a target went down, a
verdict changed) under thousands of repeats. ChangeLog remembers the last value logged per key and
writes a line only when it changes. Memory is bounded: past LIMIT keys (route churn) it forgets
everything, so at worst a line repeats.
"""

from __future__ import annotations

from typing import Any

from specwatch.base.logsetup import get_logger
from specwatch.engines.advice import VLLM_ENGINES, advise
from specwatch.verdict.evaluation import RouteEvaluation

log = get_logger("specwatch")


class ChangeLog:
    """The last value logged per key (("target", name), ("verdict", route, window), ...)."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._last: dict[tuple[object, ...], object] = {}

    def changed(self, key: tuple[object, ...], value: object) -> bool:
        """True (and remembered) when `value` differs from the last one seen for `key`."""
        if len(self._last) > self.LIMIT:
            self._last.clear()  # route churn must not grow memory; at worst a line repeats
        if self._last.get(key) == value:
            return False
        self._last[key] = value
        return True

    def clear(self) -> None:
        """Forget every key (the routes and windows started afresh)."""
        self._last.clear()

    def info(self, key: tuple[object, ...], value: object, event: str, **fields: Any) -> None:
        """Log `event` at info level when `key`'s value changed."""
        if self.changed(key, value):
            log.info(event, **fields)

    def target_down(self, target: str, event: str, reason: str | None, error: str) -> None:
        """A target went down (unreachable) or was rejected (a payload not read), or its reason
        changed: a warning, since nothing of that target is served until it is back."""
        if self.changed(("target", target), ("down", reason)):
            log.warning(event, target=target, reason=reason, error=error[:200])

    def verdict(self, key: tuple[object, ...], evaluation: RouteEvaluation, **where: str) -> None:
        """A window's verdict changed (`where`: the replica, in fleet mode), with its advice in the
        route's engine's terms."""
        if not self.changed(key, evaluation.verdict):
            return
        stats = evaluation.stats
        advice = advise(evaluation.advised, stats.engine)
        log.info(
            "verdict_changed",
            **where,
            route=stats.route,
            window=stats.window,
            verdict=evaluation.verdict,
            acceptance_rate=evaluation.value("acceptance_rate"),
            breakeven_acceptance_rate=evaluation.value("breakeven_acceptance_rate"),
            batch_size=stats.batch_size,
            recommended_config=evaluation.recommended_config if stats.engine in VLLM_ENGINES else None,
            recommended_command=None if advice is None else advice.command,
        )
