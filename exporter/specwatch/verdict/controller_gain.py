"""What a controller of K delivers: its realised gain over no speculation, and against the best
fixed K at the live batch. Pure functions.

An engine that picks K itself (vLLM's adaptive verification or batch schedule, SGLang's
``--speculative-adaptive`` bands) runs many K in one window: a window's acceptance rate and mean K
are averages over steps that each ran another K, at another batch, and the break-even of one fixed
K says little about them. A controller that verifies longer drafts accepts a smaller share of them
while every request decodes faster (vLLM PR #52992: throughput up, acceptance length down), so a
falling acceptance rate is no loss. What the engine delivers is measured instead:

    gain = tokens per request-step x T_plain / measured mean engine step

with T_plain the spec-off counterfactual of the window's steps: the plain forward over its batch,
with the prefill that rode along (``plain_step_seconds``), priced by the route's learned curve when
it has one, the cost model's prior otherwise. Its interval adds, in quadrature, the cost
model's error at that batch (costmodel/uncertainty.py) and the noise of the window's mean step (its
ITL spread over the number of engine steps the window holds).

An engine that exports no per-step latency (SGLang: its inter-token latency is per token, and
there is no step counter) gives its mean step from what it generated: B requests each gaining tau
tokens per step over the window's span generate B·tau·span / step tokens, so step = B·tau·span /
Δgenerated (``gauge_window_point``), and the gain comes to T_plain · Δgenerated / (B · span): the
tokens per request-second against the plain step's. It reads a busy window: idle time in the span
counts as slower steps.

The best fixed K is the cost model's estimate from the window's per-position acceptance: the
controller's gain over it says whether the controller beats the K a user could have fixed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from specwatch import costmodel
from specwatch.costmodel import uncertainty
from specwatch.costmodel.breakeven import zero_k_band_slowdown
from specwatch.costmodel.observation import MIN_STEPS_PER_POINT, StepObservation
from specwatch.engines.advice import (
    ADAPTIVE_OPTIONS,
    SGLANG_BAND_BATCHES,
    ControllerTerms,
    adaptive_note,
    adapts_draft_length,
)
from specwatch.engines.series import Counter
from specwatch.engines.vllm_schedule import SCHEDULE_KEY, SpeculativeSchedule
from specwatch.verdict.decide import Assessment, extend_position_rates
from specwatch.windows.derive import GAUGE_MEAN, WindowStats
from specwatch.windows.window import WindowView, increases_by_counter

#: Longest draft the best fixed K is searched over when the window's per-position rates stop
#: (positions no draft reached are extended from the last measured conditional rate).
MAX_FIXED_K = 8


@dataclass(frozen=True)
class ControllerGain:
    """One window's realised gain of the engine's controller (see the module docstring)."""

    gain: float  # decode speed per request over the spec-off counterfactual
    lower: float  # its interval at decision.confidence
    upper: float
    loss_probability: float  # P(gain < 1) from the same interval
    tokens_per_step: float  # tokens one request gains per engine step (measured)
    step_seconds: float  # the measured mean engine step
    plain_step_seconds: float  # the spec-off counterfactual at the window's batch
    log_error: float  # one sigma of log(gain)
    best_fixed_k: int | None = None  # the cost model's best fixed K at the window's batch (0: none)
    best_fixed_k_speedup: float | None = None  # its speedup over no speculation (model estimate)

    @property
    def vs_best_fixed_k(self) -> float | None:
        """The realised gain over the best fixed K's estimated speedup (> 1: the controller beats
        any fixed K at this batch; None without per-position acceptance)."""
        best = self.best_fixed_k_speedup
        return None if best is None or best <= 0 else self.gain / best

    def as_dict(self) -> dict[str, object]:
        return {
            "gain_ratio": self.gain,
            "gain_ratio_lower": self.lower,
            "gain_ratio_upper": self.upper,
            "loss_probability": self.loss_probability,
            "tokens_per_step": self.tokens_per_step,
            "step_seconds": self.step_seconds,
            "plain_step_seconds": self.plain_step_seconds,
            "best_fixed_k": self.best_fixed_k,
            "best_fixed_k_speedup": self.best_fixed_k_speedup,
            "best_fixed_k_gain_ratio": self.vs_best_fixed_k,
        }


def measurement_log_error(stats: WindowStats, steps: float) -> float:
    """One sigma of the log of the window's mean step: one step's spread (from the ITL quantiles)
    over the square root of the engine steps it holds."""
    spread = uncertainty.step_log_spread(stats.itl_p50_seconds, stats.itl_p99_seconds)
    return spread / math.sqrt(max(steps, 1.0))


def best_fixed_k(
    cm: costmodel.CostModel, batch: float, rates: tuple[float, ...], coverage: float
) -> tuple[int, float] | None:
    """(K, its speedup) of the fixed K with the highest estimated speedup at ``batch`` (K = 0,
    speedup 1, when none pays); None without per-position rates."""
    if not rates:
        return None
    p = extend_position_rates(rates, max(len(rates), MAX_FIXED_K))
    best, best_speedup = 0, 1.0
    for k in range(1, len(p) + 1):
        speedup = costmodel.expected_speedup_for_positions(cm, batch, p[:k], coverage)
        if speedup > best_speedup:
            best, best_speedup = k, speedup
    return best, best_speedup


def plain_step_seconds(cm: costmodel.CostModel, obs: StepObservation) -> float:
    """The mean of the window's engine steps without speculation: the plain forward over the batch,
    with the prefill that rode along. A prompt shorter than the token budget is prefilled whole in
    one step, so prefill rides on a share prefill-per-step / P of the steps, P the prompt; the
    engine does not export prompt lengths, the cost model's context per request stands for P (it
    is the prompt plus half the output). Pricing the prefill spread evenly over every step instead
    would miss that the steps carrying a prompt cross the roofline's knee (17 % too low a gain on
    the simulator's adaptive-wins at batch 12)."""
    b = max(obs.batch, 1.0)
    context = b * cm.context_tokens
    prompt = max(cm.context_tokens, 1.0)
    share = obs.prefill_tokens / prompt
    if share >= 1.0:
        return cm.step_time(b + obs.prefill_tokens, context)
    return (1.0 - share) * cm.step_time(b, context) + share * cm.step_time(b + prompt, context)


def gauge_window_point(view: WindowView, stats: WindowStats) -> StepObservation | None:
    """A window of an engine whose acceptance is gauges (SGLang) as a step-time point: its mean
    step from the tokens generated over the span at its mean batch and acceptance length (module
    docstring), its prefill from the prompt-token counter. None without those, or with too few
    steps."""
    gen, batch, tau = stats.generation_tokens, stats.batch_size, stats.mean_acceptance_length
    if stats.acceptance_basis != GAUGE_MEAN or not gen or gen <= 0 or not batch or batch < 0.5 or tau is None:
        return None
    if stats.span_seconds <= 0:
        return None
    step = batch * tau * stats.span_seconds / gen
    steps = stats.span_seconds / step
    if steps < MIN_STEPS_PER_POINT:
        return None
    prompt = increases_by_counter(view.increases(), (Counter.PROMPT,))[Counter.PROMPT]
    k = stats.draft_length or 0.0
    return StepObservation(
        t=stats.t,
        batch=batch,
        query_tokens=batch * (1.0 + k),
        step_seconds=step,
        draft_length=k,
        draft_coverage=1.0,
        steps=steps,
        prefill_tokens=prompt / steps,
    )


def delivered_gain(
    cm: costmodel.CostModel,
    stats: WindowStats,
    obs: StepObservation | None,
    *,
    confidence: float,
) -> ControllerGain | None:
    """The window's realised gain over no speculation, or None when it lacks drafts or steps.
    ``obs``: the window as a step-time point (bookkeeping.window_point)."""
    drafts = stats.drafts
    if obs is None or not drafts or drafts <= 0 or stats.mean_acceptance_length is None:
        return None
    coverage = costmodel.draft_coverage(stats.draft_coverage)
    tokens_per_step = 1.0 + coverage * (stats.mean_acceptance_length - 1.0)
    b = max(obs.batch, 1.0)
    plain = plain_step_seconds(cm, obs)
    gain = tokens_per_step * plain / obs.step_seconds
    model = uncertainty.model_log_error(cm, b)
    log_error = math.hypot(model, measurement_log_error(stats, obs.steps))
    half = uncertainty.z_for(confidence) * log_error
    best = best_fixed_k(cm, b, stats.position_rates or (), coverage)
    return ControllerGain(
        gain=gain,
        lower=gain * math.exp(-half),
        upper=gain * math.exp(half),
        loss_probability=uncertainty.loss_probability(gain, log_error, 0.0),
        tokens_per_step=tokens_per_step,
        step_seconds=obs.step_seconds,
        plain_step_seconds=plain,
        log_error=log_error,
        best_fixed_k=None if best is None else best[0],
        best_fixed_k_speedup=None if best is None else best[1],
    )


def judges_by_delivery(config: Mapping[str, object] | None, schedule: SpeculativeSchedule | None) -> bool:
    """Whether the stated config makes the engine move K itself (adaptive verification, SGLang's
    adaptive bands, a batch schedule): its speedup is then judged by what it delivers."""
    return adapts_draft_length(config) or (schedule is not None and len(set(schedule.k_values)) > 1)


def judged(assessment: Assessment, gain: ControllerGain, config: Mapping[str, object] | None) -> Assessment:
    """The assessment with its speedup, interval and loss probability replaced by what the engine
    delivers. Speculation that pays there (interval above 1) is kept whatever one fixed K's
    break-even says; one that loses there (interval below 1) is disabled; in between the
    assessment's candidate stands, but a shorter K where the engine chooses K per step itself
    (adaptive verification, SGLang's bands), which is moot: keep."""
    note = (
        f"The engine moves K itself: speculation is judged by what it delivers ({gain.tokens_per_step:.2f} tokens "
        f"per request-step in {1e3 * gain.step_seconds:.2f} ms against a {1e3 * gain.plain_step_seconds:.2f} ms "
        f"plain step: {gain.gain:.2f}x), not by the acceptance of one fixed K."
    )
    delivered = replace(
        assessment,
        expected_speedup=gain.gain,
        speedup_lower=gain.lower,
        speedup_upper=gain.upper,
        loss_probability=gain.loss_probability,
        model_log_error=gain.log_error,
        sampling_log_error=0.0,
    )
    if gain.upper < 1.0:
        return replace(
            delivered,
            candidate="disable",
            recommended_draft_length=0,
            recommended_config=None,
            config_changes=None,
            action="remove_speculative_config",
            measurement=None,
            notes=(note,),
        )
    # Where the engine chooses K per step itself, a shorter K is moot, and keep keeps the K it was
    # started with (the window's K is the controller's choice, not a setting to change).
    adapts = adapts_draft_length(config)
    moot = assessment.candidate == "shorten" and adapts
    started = (config or {}).get("num_speculative_tokens") if adapts else None
    if moot or (gain.lower > 1.0 and assessment.candidate in ("disable", "undecided")):
        notes = (note, adaptive_note(config)) if adapts else (note,)
        k = started if isinstance(started, int) else assessment.recommended_draft_length or None
        return replace(
            delivered,
            candidate="keep",
            recommended_draft_length=k,
            recommended_config=None,
            config_changes=None,
            action="no_change",
            measurement=None,
            notes=notes,
        )
    if isinstance(started, int) and assessment.candidate == "keep":
        delivered = replace(delivered, recommended_draft_length=started)
    return replace(delivered, notes=(*assessment.notes, note))


def iid_position_rates(acceptance_length: float | None, draft_length: float | None) -> tuple[float, ...]:
    """p_1..p_K of i.i.d. per-position acceptance c with the measured acceptance length
    (1 + c + c^2 + ... + c^K, K the draft length rounded): what an engine that exports no
    per-position counts (SGLang's gauges) tells of its drafter. () without both."""
    if acceptance_length is None or draft_length is None or draft_length < 0.5:
        return ()
    k = max(round(draft_length), 1)
    target = min(max(acceptance_length - 1.0, 0.0), float(k))
    low, high = 0.0, 1.0
    for _ in range(50):
        c = (low + high) / 2
        if sum(c**i for i in range(1, k + 1)) < target:
            low = c
        else:
            high = c
    c = (low + high) / 2
    return tuple(c**i for i in range(1, k + 1))


def controller_terms(
    cm: costmodel.CostModel,
    stats: WindowStats,
    assessment: Assessment,
    gain: ControllerGain | None,
    batches: Sequence[float],
    config: Mapping[str, object] | None = None,
) -> ControllerTerms | None:
    """What the advice in the engine's controller's terms needs (engines/advice.py): priced here,
    where the cost model is. ``batches``: the batch sizes of the route's windows now (their ends
    tell whether the break-even moves across the acceptance); ``config``: the stated draft.config.
    None without an assessed window."""
    if assessment.expected_speedup is None or not stats.batch_size:
        return None
    b = max(float(stats.batch_size), 1.0)
    k = float(stats.draft_length or 0.0)
    coverage = costmodel.draft_coverage(stats.draft_coverage)
    seen = [x for x in batches if x and x > 0]
    breakeven_range = None
    if k > 0 and len(seen) > 1 and min(seen) < max(seen):
        breakeven_range = (
            costmodel.breakeven_acceptance_rate(cm, min(seen), k, coverage),
            costmodel.breakeven_acceptance_rate(cm, max(seen), k, coverage),
        )
    rates = stats.position_rates or ()
    if not rates and stats.acceptance_basis == GAUGE_MEAN:
        rates = iid_position_rates(stats.mean_acceptance_length, stats.draft_length)
    band_ks: tuple[int, ...] = ()
    best = gain.best_fixed_k if gain is not None else None
    if rates and stats.engine == "sglang":
        p = extend_position_rates(rates, max(len(rates), MAX_FIXED_K))
        band_ks = tuple(costmodel.best_draft_length(cm, batch, p, coverage=coverage) for batch in SGLANG_BAND_BATCHES)
    if best is None and rates:
        found = best_fixed_k(cm, b, rates, coverage)
        best = None if found is None else found[0]
    return ControllerTerms(
        batch=b,
        zero_k_tax=zero_k_band_slowdown(b),
        acceptance_rate=stats.acceptance_rate,
        breakeven=assessment.breakeven_acceptance_rate,
        breakeven_range=breakeven_range,
        delivered_gain=None if gain is None else gain.gain,
        best_fixed_k=best,
        band_ks=band_ks,
        adaptive_option=next((o for o in ADAPTIVE_OPTIONS.values() if config and config.get(o) is True), ""),
        schedule_stated=bool(config and config.get(SCHEDULE_KEY)),
    )
