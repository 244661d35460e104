"""Verdicts: is speculation paying at the live batch size, and what to change.

Pure: takes a CostModel, one window's WindowStats and the decision settings, returns numbers.
The hold (a new verdict must repeat ``hold`` evaluations) lives in ``next_verdict``. The rules and
their hysteresis are explained in docs/costmodel.md ("Verdicts").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import costmodel as cmod
from .derive import WindowStats

if TYPE_CHECKING:
    from .config import DecisionConfig

VERDICTS = ("spec_off", "insufficient_data", "keep", "shorten", "disable")

#: Largest batch the recommended V1 schedule covers when the server's max_num_seqs is unknown
#: (the range used in vLLM's dynamic speculative decoding docs).
DEFAULT_SCHEDULE_MAX_BATCH = 512

#: Keys to merge into ``--speculative-config``.
SpeculativeConfig = dict[str, cmod.SpeculativeConfigValue]


@dataclass(frozen=True)
class Assessment:
    candidate: str                          # one of VERDICTS, before the hold
    breakeven_acceptance_rate: float | None = None
    acceptance_margin: float | None = None      # alpha − break-even
    expected_speedup: float | None = None
    recommended_draft_length: int | None = None  # 0 = disable
    max_speculative_batch_size: int | None = None
    recommended_config: SpeculativeConfig | None = None


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def assess(cm: cmod.CostModel, stats: WindowStats, decision: DecisionConfig, method: str | None,
           previous_verdict: str | None, max_batch: int = DEFAULT_SCHEDULE_MAX_BATCH,
           config_method: str | None = "same") -> Assessment:
    """Assess one route/window. ``decision`` gives min_drafts and margin. ``previous_verdict`` is
    the verdict in effect, which sets the side of the hysteresis band. ``config_method`` is the
    method the recommended config names ("same" = ``method``, None = name none)."""
    drafts = _finite(stats.drafts)
    alpha = _finite(stats.acceptance_rate)
    if not stats.spec_present:
        return Assessment(candidate="spec_off")
    if drafts is not None and drafts <= 0:
        # Configured but not drafting: while tokens are generated that is speculation switched off
        # (e.g. a num_speculative_tokens_per_batch_size band with K=0); an idle server says nothing.
        generated = _finite(stats.generation_tokens) or 0.0
        return Assessment(candidate="spec_off" if generated > 0 else "insufficient_data")
    k = _finite(stats.draft_length)
    batch = _finite(stats.batch_size)
    # V0 has no draft counter (drafts is None) and reports lifetime acceptance: no guard to apply.
    too_few = drafts is not None and drafts < decision.min_drafts
    if too_few or alpha is None or k is None or k <= 0 or batch is None:
        # Too few drafts (or a missing input): a verdict here would be noise, so no gauges either.
        return Assessment(candidate="insufficient_data")

    margin = float(decision.margin or 0.0)
    cm = cm.with_method(method).with_coverage(_finite(stats.draft_coverage))
    b = max(batch, 1.0)  # drafts were verified, so at least one request was decoding
    breakeven = cmod.breakeven_acceptance_rate(cm, b, k)
    speedup = cmod.expected_speedup(cm, b, k, alpha)

    # Window size of the config = configured K (number of `position` labels), else measured K.
    k_window = stats.configured_k or max(1, math.ceil(k - 1e-9))
    rates = stats.position_rates
    if rates:
        p = tuple(float(x) for x in rates)
    else:
        # No per-position counters (V0 schema): i.i.d. rates that reproduce alpha at K.
        p = cmod.position_rates_from_alpha(alpha, k_window)
    best_k = cmod.best_draft_length(cm, b, p)
    b_max = cmod.max_speculative_batch_size(cm, k, alpha)
    # The config names the method only when it is known (vLLM exports none; an inferred cost class
    # must not switch the user's drafter). A batch schedule only where vLLM can apply it: V1
    # schema (0.24+ has num_speculative_tokens_per_batch_size) and one engine (off with DP > 1).
    named = method if config_method == "same" else config_method
    if stats.schema == "v1" and (stats.engines or 1) <= 1:
        schedule = cmod.recommend_schedule(cm, p, max(int(max_batch), math.ceil(b)))
    else:
        schedule = [[1, max(int(max_batch), math.ceil(b)), best_k]]
    config = None
    k_max = max(kk for _, _, kk in schedule)
    if k_max > 0:
        config = cmod.speculative_config(named, int(k_max), schedule)

    # Hysteresis: once disabled, speculation must clear the line by `margin` to come back;
    # otherwise it must fall `margin` below it to be disabled.
    line = breakeven + margin if previous_verdict == "disable" else breakeven - margin
    # The same band in speedup units (dS/dalpha = K·T_base/T_spec) for the shorten decision.
    band = margin * cm.draft_coverage * k * cm.base_step_time(b) / cm.spec_step_time(b, k)
    s_best = cmod.expected_speedup_for_positions(cm, b, p[:best_k]) if best_k > 0 else 1.0
    s_now = cmod.expected_speedup_for_positions(cm, b, p[:k_window]) if p else speedup
    # The same hysteresis in speedup units: leaving disable needs 1 + band, entering it 1 - band.
    speed_line = 1.0 + band if previous_verdict == "disable" else 1.0 - band
    if best_k == 0:
        # No draft length pays: disable, unless alpha at the measured K is still inside the band.
        candidate = "disable" if (alpha < line or speedup < speed_line) else "keep"
    elif best_k < k_window and (alpha < line or previous_verdict == "shorten" or s_best - s_now > band):
        # Below the line at K but a shorter draft pays: the actionable verdict is shorten, and the
        # recommended config says so (disable would contradict it).
        candidate = "shorten"
    elif alpha < line:
        candidate = "disable"
    else:
        candidate = "keep"

    return Assessment(
        breakeven_acceptance_rate=breakeven,
        acceptance_margin=alpha - breakeven,
        expected_speedup=speedup,
        recommended_draft_length=best_k,
        max_speculative_batch_size=b_max,
        recommended_config=config,
        candidate=candidate,
    )


@dataclass(frozen=True)
class VerdictState:
    current: str
    pending: str | None = None
    pending_count: int = 0


def next_verdict(state: VerdictState | None, candidate: str, hold: int) -> VerdictState:
    """Apply the hold: the first evaluation takes effect at once; later a different candidate
    must repeat ``hold`` consecutive evaluations (a different candidate restarts the count)."""
    if candidate not in VERDICTS:
        raise ValueError(f"unknown verdict {candidate!r}")
    if state is None:
        return VerdictState(candidate)
    if candidate == state.current:
        return VerdictState(state.current)
    count = state.pending_count + 1 if candidate == state.pending else 1
    if count >= max(int(hold), 1):
        return VerdictState(candidate)
    return VerdictState(state.current, candidate, count)
