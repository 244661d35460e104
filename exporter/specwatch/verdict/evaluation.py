"""One route's windows -> its evaluations: the stage between the window statistics and the outputs,
shared by the sidecar's Pipeline and fleet mode.

`evaluate_route` resolves the drafter's cost class, applies the sample guard, assesses each window
(the cost model's break-even, best K, largest speculative batch), moves the verdict through its
hold and checks the stated --speculative-config. A `RouteEvaluation` is the result, read through
typed accessors (absent below the guard); `evaluation_record` is its replay line / status entry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, Protocol, get_args

from specwatch import costmodel
from specwatch.config import Config, DecisionConfig
from specwatch.engines.registry import BY_NAME
from specwatch.engines.series import RouteSnapshot
from specwatch.engines.vllm import SCHEMA_V0
from specwatch.engines.vllm_schedule import SpeculativeSchedule
from specwatch.verdict import controller as ctl
from specwatch.verdict import decide
from specwatch.verdict.bookkeeping import window_point
from specwatch.verdict.config_check import ConfigCheck, check_draft_length
from specwatch.verdict.controller_gain import (
    ControllerGain,
    controller_terms,
    delivered_gain,
    gauge_window_point,
    judged,
    judges_by_delivery,
)
from specwatch.windows.derive import COUNTER_RATIO, WindowStats, with_drafter
from specwatch.windows.window import WindowView

#: The numeric values of an evaluation by name, as exported (RouteEvaluation.value).
NumericValue = Literal[
    "acceptance_rate",
    "mean_acceptance_length",
    "draft_length",
    "batch_size",
    "itl_p50_seconds",
    "itl_p99_seconds",
    "itl_per_token_mean_seconds",
    "breakeven_acceptance_rate",
    "acceptance_margin",
    "expected_speedup",
    "expected_speedup_lower",
    "expected_speedup_upper",
    "loss_probability",
    "recommended_draft_length",
    "max_speculative_batch_size",
    "controller_gain_ratio",
    "controller_gain_ratio_lower",
    "controller_gain_ratio_upper",
    "controller_loss_probability",
    "controller_best_fixed_k_gain_ratio",
]
NUMERIC_VALUES: frozenset[str] = frozenset(get_args(NumericValue))


@dataclass(frozen=True)
class RouteEvaluation:
    """One route-window's evaluation. Read its values through the accessors below: a ratio derived
    from the target is absent (None) below the sample guard, and so is every assessed value."""

    stats: WindowStats
    assessment: decide.Assessment | None
    verdict: str | None
    guard_passed: bool
    # The observed draft length against the stated draft.config (None: no config, or no answer).
    config_check: ConfigCheck | None = None
    # The assessment behind the verdict in effect (the current one, or the one that set the verdict
    # while a new candidate waits out the hold): the recommendation always belongs to the verdict.
    advice: decide.Assessment | None = None
    # What the engine's own controller of K delivers (controller_gain.py), where it moves K itself.
    controller_gain: ControllerGain | None = None

    # -- target-derived ratios: absent below the sample guard ---------------------------------
    @property
    def acceptance_rate(self) -> float | None:
        return self.stats.acceptance_rate if self.guard_passed else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return self.stats.mean_acceptance_length if self.guard_passed else None

    @property
    def draft_length(self) -> float | None:
        return self.stats.draft_length if self.guard_passed else None

    @property
    def position_rates(self) -> tuple[float, ...] | None:
        return self.stats.position_rates if self.guard_passed else None

    # -- measured without a guard ---------------------------------------------------------------
    @property
    def batch_size(self) -> float | None:
        return self.stats.batch_size

    @property
    def itl_p50_seconds(self) -> float | None:
        return self.stats.itl_p50_seconds

    @property
    def itl_p99_seconds(self) -> float | None:
        return self.stats.itl_p99_seconds

    @property
    def itl_per_token_mean_seconds(self) -> float | None:
        return self.stats.itl_per_token_mean_seconds

    # -- the assessment (now) and the advice (behind the verdict in effect) -------------------------
    @property
    def assessed(self) -> decide.Assessment | None:
        """The current assessment, None below the sample guard."""
        return self.assessment if self.guard_passed else None

    @property
    def advised(self) -> decide.Assessment | None:
        """The assessment behind the verdict in effect, None below the sample guard."""
        return self.advice if self.guard_passed else None

    @property
    def breakeven_acceptance_rate(self) -> float | None:
        return None if (a := self.assessed) is None else a.breakeven_acceptance_rate

    @property
    def acceptance_margin(self) -> float | None:
        return None if (a := self.assessed) is None else a.acceptance_margin

    @property
    def expected_speedup(self) -> float | None:
        return None if (a := self.assessed) is None else a.expected_speedup

    @property
    def expected_speedup_lower(self) -> float | None:
        return None if (a := self.assessed) is None else a.speedup_lower

    @property
    def expected_speedup_upper(self) -> float | None:
        return None if (a := self.assessed) is None else a.speedup_upper

    @property
    def loss_probability(self) -> float | None:
        """P(speedup < 1) from the same interval as expected_speedup_lower/_upper."""
        return None if (a := self.assessed) is None else a.loss_probability

    # -- the engine's controller of K, by what it delivers -----------------------------------------
    @property
    def delivered(self) -> ControllerGain | None:
        """The controller's realised gain, None below the sample guard or without a controller."""
        return self.controller_gain if self.guard_passed else None

    @property
    def controller_gain_ratio(self) -> float | None:
        return None if (g := self.delivered) is None else g.gain

    @property
    def controller_gain_ratio_lower(self) -> float | None:
        return None if (g := self.delivered) is None else g.lower

    @property
    def controller_gain_ratio_upper(self) -> float | None:
        return None if (g := self.delivered) is None else g.upper

    @property
    def controller_loss_probability(self) -> float | None:
        return None if (g := self.delivered) is None else g.loss_probability

    @property
    def controller_best_fixed_k_gain_ratio(self) -> float | None:
        return None if (g := self.delivered) is None else g.vs_best_fixed_k

    @property
    def measurement(self) -> decide.Measurement | None:
        """What would decide, while the verdict in effect is undecided."""
        return None if (a := self.advised) is None else a.measurement

    @property
    def max_speculative_batch_size(self) -> int | None:
        return None if (a := self.assessed) is None else a.max_speculative_batch_size

    @property
    def recommended_draft_length(self) -> int | None:
        return None if (a := self.advised) is None else a.recommended_draft_length

    @property
    def recommended_config(self) -> dict[str, object] | None:
        return None if (a := self.advised) is None else a.recommended_config

    def value(self, name: NumericValue) -> float | None:
        """A numeric value by name, as exported (the accessor of that name; the K and batch values
        are ints). Non-numeric values have only their accessors: position_rates, recommended_config."""
        if name not in NUMERIC_VALUES:
            raise ValueError(f"{name!r} is not a numeric value of an evaluation")
        number: float | None = getattr(self, name)
        return number


#: Share of request-steps carrying a draft above which the drafter is taken to draft every step:
#: model-based drafters propose at every decode step; n-gram lookup misses leave ~30 % of them
#: undrafted on real traffic (0.70-0.72 on the real vLLM run).
FULL_COVERAGE = 0.98
#: Methods whose drafts are short by themselves (lookup runs out of context), not only by a schedule.
VARIABLE_LENGTH_METHODS = ("ngram", "ngram_gpu", "suffix")


def resolve_method(
    configured: str, stats: WindowStats, *, min_drafts: float = 0.0, schedule_ks: Sequence[int] | None = None
) -> str | None:
    """vLLM exports no speculative method. With `auto`, infer the cost class from the drafts:
    n-gram/suffix lookup often proposes fewer than K tokens (3.4 of 4 on a real run) and leaves
    request-steps undrafted; model-based drafters propose the K they are given at every step. The
    result names its origin: "auto:ngram" or "auto:eagle3". None = this window is no evidence
    (fewer than ``min_drafts`` drafts, K=1, no drafts): the caller keeps what it had (sticky).

    A schedule shortens a model-based drafter's mean draft length too. With a known schedule
    (``schedule_ks``, its K values) a mean below every K it gives is n-gram; a mean inside its range
    is n-gram only if request-steps went undrafted. Without one, a mean below K with every
    request-step drafted is a model-based drafter under a schedule nobody told us about."""
    if configured != "auto":
        return configured
    if stats.draft_length is None or not stats.configured_k or stats.configured_k < 2:
        return None  # with K=1 every drafter proposes exactly one token: no evidence
    if stats.drafts is not None and stats.drafts < max(min_drafts, 1.0):
        return None  # a handful of drafts (2-4 when traffic stops) says nothing about the drafter
    k, mean = stats.configured_k, stats.draft_length
    fully_drafted = stats.draft_coverage is not None and stats.draft_coverage >= FULL_COVERAGE
    if schedule_ks:
        positive = [min(int(x), k) for x in schedule_ks if x > 0]
        if positive and mean < 0.98 * min(positive):
            return "auto:ngram"
        if mean < 0.98 * k and stats.draft_coverage is not None and not fully_drafted:
            return None  # a K=0 band or lookup misses: cannot tell, keep the last answer
        return "auto:eagle3"
    if mean < 0.98 * k and not fully_drafted:
        return "auto:ngram"
    return "auto:eagle3"


def scheduled_ks(schedule: SpeculativeSchedule | None) -> tuple[int, ...] | None:
    """The K values of a stated batch schedule (3- or 5-item bands); None without one."""
    return schedule.k_values if schedule is not None and schedule.has_schedule else None


WindowEntry = tuple[float, str, WindowView, WindowStats]  # (width s, label, view, its stats)


class AssessFunction(Protocol):
    """decide.assess, or a memo of it with the same answers (memo.AssessmentCache.assess)."""

    def __call__(
        self,
        cm: costmodel.CostModel,
        stats: WindowStats,
        decision: DecisionConfig,
        method: str | None,
        previous_verdict: str | None,
        *,
        config_method: str | None = ...,
        base_config: Mapping[str, object] | None = ...,
    ) -> decide.Assessment: ...


@dataclass
class RouteRecord:
    """What one route keeps between evaluations: the sidecar's per-route record, or fleet mode's
    per replica and route (each extends it)."""

    method: str = "auto:unknown"
    verdicts: dict[str, decide.VerdictState] = field(default_factory=dict)
    advice: dict[str, decide.Assessment] = field(default_factory=dict)  # per window: behind the verdict
    evaluations: tuple[RouteEvaluation, ...] = ()
    seen_poll: int = 0  # the last poll that carried it (bookkeeping.EvaluationContext.expired)


def passes_guard(stats: WindowStats, latest: RouteSnapshot, min_drafts: float) -> bool:
    """The sample guard behind every target-derived ratio and assessment."""
    if latest.schema == SCHEMA_V0:
        return stats.acceptance_rate is not None  # V0 values are lifetime, over every draft so far
    return stats.drafts is not None and stats.drafts >= min_drafts


def update_route_method(
    config: Config, memory: RouteRecord, windows: Sequence[WindowEntry], schedule: SpeculativeSchedule | None
) -> str:
    """One cost class per route, from the longest window with enough drafts (stable across
    windows); kept while no window is evidence (speculation idle or off). Idempotent for the same
    windows: the sidecar resolves it before learning, evaluate_route again for fleet mode."""
    configured = config.draft.method
    if configured != "auto":
        memory.method = configured
    schedule_ks = scheduled_ks(schedule)
    for _, _, _, stats in sorted(windows, key=lambda w: -w[0]):
        resolved = resolve_method(configured, stats, min_drafts=config.decision.min_drafts, schedule_ks=schedule_ks)
        if resolved is not None:
            memory.method = resolved
            break
    return memory.method


def config_method_for(configured: str, cost_class: str) -> str | None:
    """The method the recommended config names: only a known one, configured or inferred n-gram
    (self-contained); an inferred model-based drafter's method and path are not known."""
    return configured if configured != "auto" else ("ngram" if cost_class == "ngram" else None)


def drafts_vary(cost_class: str, stats: WindowStats) -> bool:
    """Whether a short draft is the drafter's own (lookup ran out, the engine cut it) rather than a
    schedule's band: decides how p_i is read from the window (derive.with_drafter)."""
    if cost_class in VARIABLE_LENGTH_METHODS or cost_class == "unknown":
        return True
    engine = BY_NAME.get(stats.engine)
    return engine is not None and engine.drafts_vary_in_length


def route_controller(
    config: Config,
    schedule: SpeculativeSchedule | None,
    history: deque[ctl.KObservation],
    evaluations: Sequence[RouteEvaluation],
    *,
    fresh: bool,
    method: str,
    expects_speculation: bool,
) -> ctl.Controller | None:
    """A route's controller of K (verdict/controller.py) from its evaluations, in both modes: its
    history of (batch, K) grows only with fresh data. None without an evaluation."""
    if not evaluations:
        return None
    shortest = min(evaluations, key=lambda e: e.stats.span_seconds)
    if fresh:
        varies = drafts_vary(method.rsplit(":", maxsplit=1)[-1], shortest.stats)
        ctl.observe(history, shortest.stats, varies=varies, guarded=shortest.guard_passed)
    stated = config.draft.config
    return ctl.classify(
        [(e.stats, e.config_check, e.guard_passed) for e in evaluations],
        history,
        engine=shortest.stats.engine,
        config=stated,
        schedule=schedule,
        k=shortest.stats.configured_k or config.draft.k,
        min_drafts=config.decision.min_drafts,
        configured=expects_speculation or stated is not None,
    )


def with_controller_terms(
    cm: costmodel.CostModel,
    stats: WindowStats,
    assessment: decide.Assessment,
    gain: ControllerGain | None,
    batches: Sequence[float],
    config: Mapping[str, object] | None,
) -> decide.Assessment:
    """The assessment with its controller terms (controller_gain.controller_terms), worked out when
    the advice first reads them (decide.with_deferred): every input is immutable, so later
    they are what they would be now. ``with_controller_terms_plain`` works them out now."""
    return decide.with_deferred(
        assessment, "controller_terms", partial(controller_terms, cm, stats, assessment, gain, batches, config)
    )


def with_controller_terms_plain(
    cm: costmodel.CostModel,
    stats: WindowStats,
    assessment: decide.Assessment,
    gain: ControllerGain | None,
    batches: Sequence[float],
    config: Mapping[str, object] | None,
) -> decide.Assessment:
    terms = controller_terms(cm, stats, assessment, gain, batches, config)
    return decide.with_fields(assessment, controller_terms=terms)


def evaluate_route(
    config: Config,
    cost_model: costmodel.CostModel,
    schedule: SpeculativeSchedule | None,
    memory: RouteRecord,
    windows: Sequence[WindowEntry],
    now: float,
    *,
    fresh: bool,
    assess: AssessFunction = decide.assess,
    method: str | None = None,
) -> tuple[RouteEvaluation, ...]:
    """One route's windows -> its evaluations, the same in sidecar and fleet mode: one cost class
    from the longest window with enough drafts, the sample guard, the assessment, the hold, the
    stated config's check and the advice behind the verdict in effect. Verdicts move only when
    ``fresh`` (a new snapshot arrived): a failing target never moves one. ``assess`` may be a memo
    of decide.assess (memo.AssessmentCache.assess): the same answer for the same inputs.
    ``method``: what update_route_method returned for these windows, when the caller already
    resolved it (it is idempotent); None resolves it here."""
    configured = config.draft.method
    # The --speculative-config the server runs with, when the user stated it (draft.config).
    stated = getattr(config.draft, "config", None)
    base_config: Mapping[str, object] | None = stated if isinstance(stated, Mapping) else None
    schedule_ks = scheduled_ks(schedule)
    decision = config.decision
    # Half a poll of slack: evaluations are one evaluation period apart, give or take scheduling.
    hold = max(decision.hold_seconds(config.evaluation_period) - 0.5 * config.poll_interval, 0.0)
    if method is None:
        method = update_route_method(config, memory, windows, schedule)
    cost_class = method.split(":")[-1]
    config_method = config_method_for(configured, cost_class)
    by_delivery = judges_by_delivery(base_config, schedule)
    batches = tuple(w[3].batch_size or 0.0 for w in windows)
    evaluations: list[RouteEvaluation] = []
    for _, label, view, measured in windows:
        stats = with_drafter(measured, variable_length=drafts_vary(cost_class, measured), schedule_ks=schedule_ks)
        guard = passes_guard(stats, view.last.snapshot, decision.min_drafts)
        previous = memory.verdicts.get(label)
        assessment = assess(
            cost_model,
            stats,
            decision,
            cost_class,
            previous.current if previous else None,
            config_method=config_method,
            base_config=base_config,
        )
        gain = None
        if by_delivery and guard:
            # The engine moves K itself: judged by what it delivers, not one fixed K's break-even.
            point = window_point(view, stats.t) or gauge_window_point(view, stats)
            gain = delivered_gain(cost_model, stats, point, confidence=decision.confidence)
            if gain is not None and assessment.expected_speedup is not None:
                assessment = judged(assessment, gain, base_config)
        if guard and assessment.expected_speedup is not None:
            assessment = with_controller_terms(cost_model, stats, assessment, gain, batches, base_config)
        if fresh or previous is None:
            state = decide.next_verdict(previous, assessment.candidate, hold, now)
            memory.verdicts[label] = state
        else:
            state = previous  # no new data: a failing target never moves a verdict
        check = None
        if schedule is not None and stats.spec_present:
            check = check_draft_length(
                schedule,
                batch_size=stats.batch_size,
                drafts=stats.drafts,
                observed_k=stats.draft_length,
                min_drafts=decision.min_drafts,
            )
        if assessment.candidate == state.current:
            memory.advice[label] = assessment
        advice = memory.advice.get(label)
        if advice is not None and advice.candidate != state.current:
            advice = None
        evaluations.append(
            RouteEvaluation(
                stats, assessment, state.current, guard, config_check=check, advice=advice, controller_gain=gain
            )
        )
    return tuple(evaluations)


def evaluation_record(evaluation: RouteEvaluation) -> dict[str, object]:
    """One replay line / status entry (keys listed in docs/architecture.md, null where there is no value)."""
    stats = evaluation.stats
    assessment = evaluation.advised
    breakeven = evaluation.breakeven_acceptance_rate
    return {
        "t": stats.t,
        "route": stats.route,
        "engine": stats.engine,
        "window": stats.window,
        "acceptance_rate": evaluation.acceptance_rate,
        "mean_acceptance_length": evaluation.mean_acceptance_length,
        "draft_length": evaluation.draft_length,
        "batch_size": stats.batch_size,
        "itl_p50_seconds": stats.itl_p50_seconds,
        "itl_p99_seconds": stats.itl_p99_seconds,
        "breakeven_acceptance_rate": breakeven,
        "speculation_cannot_pay": None if breakeven is None else breakeven >= 1.0,
        "expected_speedup": evaluation.expected_speedup,
        "expected_speedup_lower": evaluation.expected_speedup_lower,
        "expected_speedup_upper": evaluation.expected_speedup_upper,
        "loss_probability": evaluation.loss_probability,
        "recommended_draft_length": evaluation.recommended_draft_length,
        "verdict": evaluation.verdict,
        "drafts": stats.drafts,
        # A complete --speculative-config vLLM accepts as pasted (null: nothing to apply, or the
        # drafter's model path is unknown, then merge `merge_into_your_speculative_config`).
        "recommended_config": None if assessment is None else assessment.recommended_config,
        "merge_into_your_speculative_config": (
            assessment.config_changes if assessment is not None and assessment.action == "merge" else None
        ),
        "recommended_action": None if assessment is None else assessment.action,
        "notes": [] if assessment is None else list(assessment.notes),
        "measurement": measurement_record(evaluation.measurement),
        # What the engine's own controller of K delivers (null for a fixed K): controller_gain.py.
        "controller_gain": None if evaluation.delivered is None else evaluation.delivered.as_dict(),
        **_basis(stats),
    }


def measurement_record(measurement: decide.Measurement | None) -> dict[str, object] | None:
    """An undecided verdict's measurement as JSON (null otherwise)."""
    if measurement is None:
        return None
    return {
        "kind": measurement.kind,
        "minutes": measurement.minutes,
        "batch_size": measurement.batch,
        "draft_length": measurement.draft_length,
        "speculative_config": measurement.speculative_config,
        "merge_into_your_speculative_config": (
            measurement.config_changes if measurement.speculative_config is None else None
        ),
        "how": measurement.how,
    }


def _basis(stats: WindowStats) -> dict[str, str]:
    """`acceptance_basis` where alpha, tau and K are no ratio of the window's counters (an engine's
    own gauge estimate, docs/engines.md); absent for the counter ratios."""
    return {} if stats.acceptance_basis == COUNTER_RATIO else {"acceptance_basis": stats.acceptance_basis}
