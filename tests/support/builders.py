"""Builders of the values many tests start from: a window's stats whose counters agree with each
other, and one route-window's evaluation of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from specwatch import costmodel as cmod
from specwatch.verdict.decide import Assessment
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.windows.derive import WindowStats


def window_stats(
    alpha: float | None = 0.6,
    k: int = 3,
    batch: float | None = 8.0,
    drafts: float | None = 2000.0,
    *,
    rates: Sequence[float] | None = None,
    configured_k: int | None = None,
    spec_present: bool = True,
    **changes: object,
) -> WindowStats:
    """A 1m window of route `chat` whose counters are consistent: Σp_i = K·alpha, tau = 1 + K·alpha;
    `changes` set any other field."""
    if rates is None and alpha is not None:
        rates = cmod.position_rates_from_alpha(alpha, k)
    stats = WindowStats(
        route="chat",
        window="1m",
        t=100.0,
        samples=13,
        span_seconds=60.0,
        spec_present=spec_present,
        drafts=drafts,
        draft_tokens=None if drafts is None else drafts * k,
        accepted_tokens=None if drafts is None or alpha is None else drafts * k * alpha,
        acceptance_rate=alpha,
        mean_acceptance_length=None if alpha is None else 1 + k * alpha,
        draft_length=float(k),
        configured_k=configured_k or k,
        position_rates=None if rates is None else tuple(rates),
        batch_size=batch,
    )
    return dataclasses.replace(stats, **changes)  # type: ignore[arg-type]


def route_evaluation(stats: WindowStats | None = None, verdict: str = "keep", guard: bool = True) -> RouteEvaluation:
    """An evaluation that passed the guard, with an assessment that pays and recommends no change."""
    assessment = Assessment(
        verdict,
        breakeven_acceptance_rate=0.4,
        acceptance_margin=0.2,
        expected_speedup=1.5,
        recommended_draft_length=3,
        max_speculative_batch_size=64,
        action="no_change",
    )
    return RouteEvaluation(stats or window_stats(), assessment, verdict, guard, advice=assessment)
