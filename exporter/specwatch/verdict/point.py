"""What the sidecar's first evaluation decides for one point: a batch size, a draft length K, an
acceptance rate and a number of drafts, as one steady window of the sidecar's longest default.

``specwatch breakeven`` answers through here, so its verdict, interval and loss probability are the
sidecar's: the point becomes the WindowStats the sidecar would derive from that window's counters,
the cost class is resolved and p_i read as evaluation.evaluate_route does, and decide.assess judges
it with no verdict in effect and the default DecisionConfig. Pure: numbers in, an evaluation out.
"""

from __future__ import annotations

from specwatch import costmodel as cmod
from specwatch.config import Config, DecisionConfig
from specwatch.verdict import decide
from specwatch.verdict.evaluation import (
    RouteEvaluation,
    config_method_for,
    drafts_vary,
    resolve_method,
)
from specwatch.windows.derive import WindowStats, with_drafter

_DEFAULTS = Config()
#: The sidecar's longest default window (5m): the one the alert rules read.
WINDOW_SECONDS = max(_DEFAULTS.windows)
#: The cost class the sidecar starts a route with (RouteRecord.method) until a window is evidence.
UNRESOLVED = "auto:unknown"


def window_drafts(cm: cmod.CostModel, batch: float, k: int, window_seconds: float = WINDOW_SECONDS) -> float:
    """Drafts in a full window at ``batch``: one per request per speculative step, a step taking the
    cost model's T_spec(batch, K) (every request-step drafts, as a model-based drafter does)."""
    b = max(float(batch), 1.0)
    return float(round(b * window_seconds / cm.spec_step_time(b, k)))


def point_window(
    *, batch: float, k: int, alpha: float, drafts: float, window_seconds: float = WINDOW_SECONDS
) -> WindowStats:
    """The WindowStats of a steady window: ``drafts`` drafts of K tokens, every request-step drafting,
    acceptances per position i.i.d. at ``alpha`` (the lesson's assumption), ``batch`` requests a step."""
    rates = cmod.position_rates_from_alpha(alpha, k)
    draft_tokens = drafts * k
    accepted = tuple(drafts * p for p in rates)
    accepted_total = alpha * draft_tokens
    return WindowStats(
        route="breakeven",
        window=f"{window_seconds:g}s",
        t=window_seconds,
        samples=int(window_seconds // _DEFAULTS.poll_interval) + 1,
        span_seconds=window_seconds,
        spec_present=True,
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_total,
        acceptance_rate=alpha,
        mean_acceptance_length=1.0 + accepted_total / drafts if drafts > 0 else None,
        draft_length=float(k),
        configured_k=k,
        batch_size=float(batch),
        generation_tokens=drafts + accepted_total,
        draft_coverage=1.0,
        accepted_by_position=accepted,
    )


def first_evaluation(
    cm: cmod.CostModel,
    stats: WindowStats,
    *,
    method: str = "auto",
    decision: DecisionConfig | None = None,
) -> RouteEvaluation:
    """The sidecar's first evaluation of ``stats`` (no verdict in effect, nothing stated of the
    server's --speculative-config): the cost class as update_route_method resolves it, p_i as
    with_drafter reads it, decide.assess, the sample guard and the verdict next_verdict gives."""
    decision = decision or _DEFAULTS.decision
    resolved = resolve_method(method, stats, min_drafts=decision.min_drafts) or (
        method if method != "auto" else UNRESOLVED
    )
    cost_class = resolved.split(":")[-1]
    stats = with_drafter(stats, variable_length=drafts_vary(cost_class, stats))
    assessment = decide.assess(
        cm, stats, decision, cost_class, None, config_method=config_method_for(method, cost_class), base_config=None
    )
    state = decide.next_verdict(None, assessment.candidate, 0.0, stats.t)
    guard = stats.drafts is not None and stats.drafts >= decision.min_drafts
    advice = assessment if assessment.candidate == state.current else None
    return RouteEvaluation(stats, assessment, state.current, guard, advice=advice)
