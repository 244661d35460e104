"""prometheus_client custom Collector: the metric contract (docs/architecture.md §4), from one State.

Families are built fresh from an immutable State on every collect(), so a route or engine that
disappears simply stops being exported (no stale children to remove), and collect() can never
fail on target data. Values that cannot be computed are omitted, never exported as 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from specwatch import __version__
from specwatch.engines.advice import VLLM_ENGINES, advise
from specwatch.engines.series import Counter
from specwatch.sidecar.state import RouteState, State
from specwatch.verdict.decide import VERDICTS, Assessment
from specwatch.verdict.evaluation import NumericValue, RouteEvaluation
from specwatch.verdict.grading import Grading
from specwatch.windows.derive import COUNTER_RATIO

CACHE_NOTE = " Computed by specwatch from its own polls of vLLM (cached between polls)."

ROUTE_LABELS = ["route", "target"]
MIRRORED_NOTE = ", mirrored monotonic across vLLM restarts."
# (canonical counter, metric name, help before MIRRORED_NOTE)
MIRRORED_COUNTERS = (
    (Counter.DRAFTS, "specwatch_drafts", "vLLM speculative drafts"),
    (Counter.DRAFT_TOKENS, "specwatch_draft_tokens", "Proposed draft tokens"),
    (Counter.ACCEPTED, "specwatch_accepted_tokens", "Accepted draft tokens"),
    (Counter.GEN, "specwatch_generation_tokens", "Generated output tokens"),
)
# The same families in both modes (fleet mode adds its replica labels): one name and help each.
ROUTE_INFO = (
    "specwatch_route_info",
    "Route metadata: model, speculative method as configured, the metric schema and the serving engine spoken.",
    ["route", "target", "model_name", "method", "schema", "engine"],
)
BASELINE_GAUGE = ("specwatch_baseline_itl_p99_seconds", "Configured spec-off P99 ITL baseline of the route.")
# Per route (labels route, target): (metric name, help).
ROUTE_GAUGES = (
    ("specwatch_route_expects_speculation", "1 if the route is configured to run speculative decoding."),
    BASELINE_GAUGE,
)
FIT_GAUGES = (
    (
        "specwatch_step_time_fit_points",
        "Windows behind the route's learned step-time curve (exponentially forgotten).",
    ),
    (
        "specwatch_step_time_fit_residual_ratio",
        "Spread of the measured step times around the route's learned curve: exp(weighted RMS of log(measured/fitted)) - 1, over the forgotten points.",
    ),
    (
        "specwatch_step_time_predicted_seconds",
        "Engine step time the cost model in use predicts at the route's last measured load.",
    ),
    ("specwatch_step_time_observed_seconds", "Mean engine step time measured at that load (ITL sum / ITL count)."),
)
#: The learned curve itself, one sample per knot (at most 65: the learner's bins), so a restarted
#: sidecar can read it back (docs/rollouts.md).
CURVE_GAUGE = (
    "specwatch_step_time_curve_seconds",
    "The route's learned step-time curve: the plain engine step time over `tokens` query tokens, one sample per knot.",
)
GRADING_GAUGES = (
    (
        "specwatch_advice_predicted_gain_ratio",
        "After the latest change of draft length or method: decode speed per request the cost model predicted for the new config over the old one, from the window before the change.",
    ),
    (
        "specwatch_advice_measured_gain_ratio",
        "After the latest change of draft length or method: measured decode speed per request after over before (ITL per token before / after).",
    ),
)

#: The window a change of K or method would now be graded against (grading.WindowSummary): what a
#: restarted sidecar reads back from Prometheus (docs/rollouts.md). Bounded: 8 quantities and K
#: positions per route.
BEFORE_WINDOW_GAUGE = (
    "specwatch_advice_before_window",
    "The route's latest longest window at the current draft length and method: what a change would be graded against (quantity: span_seconds, draft_length, acceptance_rate, batch_size, tokens_per_step, itl_p99_seconds, itl_per_token_seconds, drafts).",
)
BEFORE_POSITIONS_GAUGE = (
    "specwatch_advice_before_position_acceptance_rate",
    "Per-position acceptance rate of that window (specwatch_advice_before_window).",
)

# (metric name, RouteEvaluation value name, help)
DERIVED_GAUGES: tuple[tuple[str, NumericValue, str], ...] = (
    ("specwatch_acceptance_rate", "acceptance_rate", "Accepted / proposed draft tokens over the window (alpha)."),
    (
        "specwatch_mean_acceptance_length",
        "mean_acceptance_length",
        "Tokens emitted per speculative step over the window, bonus token included (tau).",
    ),
    ("specwatch_draft_length", "draft_length", "Mean proposed draft length K over the window (draft tokens / drafts)."),
    (
        "specwatch_batch_size",
        "batch_size",
        "Live batch size per engine over the window (requests decoded per engine step).",
    ),
    (
        "specwatch_itl_p50_seconds",
        "itl_p50_seconds",
        "P50 of vLLM's per-step inter-token latency over the window (histogram_quantile semantics).",
    ),
    (
        "specwatch_itl_p99_seconds",
        "itl_p99_seconds",
        "P99 of vLLM's per-step inter-token latency over the window (histogram_quantile semantics).",
    ),
    (
        "specwatch_itl_per_token_mean_seconds",
        "itl_per_token_mean_seconds",
        "Mean inter-token latency per generated token over the window (ITL sum / generation tokens).",
    ),
    (
        "specwatch_breakeven_acceptance_rate",
        "breakeven_acceptance_rate",
        "Acceptance rate at which speculation exactly pays at the live batch size and K (cost model), capped at 1: at 1 no acceptance rate pays (see specwatch_speculation_cannot_pay; the uncapped value is in /api/v1/status).",
    ),
    ("specwatch_acceptance_margin", "acceptance_margin", "Acceptance rate minus the break-even acceptance rate."),
    (
        "specwatch_expected_speedup",
        "expected_speedup",
        "Expected decode speedup of speculation at the live batch size (cost model; 1 = break-even).",
    ),
    (
        "specwatch_expected_speedup_lower",
        "expected_speedup_lower",
        "Lower bound of the expected speedup's interval at decision.confidence (the model's calibration error or learned residual, and alpha's sampling noise).",
    ),
    (
        "specwatch_expected_speedup_upper",
        "expected_speedup_upper",
        "Upper bound of the expected speedup's interval at decision.confidence; disable is given only when it is below 1.",
    ),
    (
        "specwatch_recommended_draft_length",
        "recommended_draft_length",
        "Draft length the recommendation gives at the live batch size: the current K for keep and undecided, 0 for disable.",
    ),
    (
        "specwatch_max_speculative_batch_size",
        "max_speculative_batch_size",
        "Largest batch size at which the current acceptance rate still pays.",
    ),
)


def _fmt_le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def config_label(advice: Assessment, engine: str) -> tuple[str, str]:
    """specwatch_recommended_config_info's (config, action) labels for a window's advice."""
    keys = advice.recommended_config if advice.action == "apply" else advice.config_changes
    m = advice.measurement
    if m is not None:
        keys = m.speculative_config if m.speculative_config is not None else m.config_changes
    text = json.dumps(keys, separators=(",", ":"), sort_keys=True) if keys else ""
    if m is not None and not keys:  # a canary, or nothing to measure: the label says which
        text = m.kind
    action = str(advice.action)
    if engine not in VLLM_ENGINES:  # in that engine's terms
        rendered = advise(advice, engine)
        text, action = (rendered.label, rendered.export_action) if rendered is not None else ("", action)
    return text, action


class WindowFamilies:
    """The per-window families of the contract, and how one evaluation fills them. Shared by the
    sidecar's collector and fleet mode's (whose labels add the replica's), so both export the same
    names, labels and rules (absent below the guard, break-even capped, the advice's action)."""

    def __init__(self, labels: list[str], note: str):
        self.gauges = {name: GaugeMetricFamily(name, text + note, labels=labels) for name, _, text in DERIVED_GAUGES}

        def gauge(name: str, text: str, *extra_labels: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=[*labels, *extra_labels])

        self.cannot_pay = gauge(
            "specwatch_speculation_cannot_pay",
            "1 when no acceptance rate pays at the live batch size and K (break-even >= 1), else 0." + note,
        )
        self.position_rate = gauge(
            "specwatch_position_acceptance_rate",
            "Share of drafts whose token at this position was accepted, over the window (p_i)." + note,
            "position",
        )
        self.window_drafts = gauge(
            "specwatch_window_drafts", "Speculative drafts in the window (the sample behind the ratios)." + note
        )
        self.verdict = gauge(
            "specwatch_verdict",
            "1 for the route's current verdict (spec_off, insufficient_data, undecided, keep, shorten, disable), 0 for the others; undecided: the speedup's interval spans 1, see the status JSON's measurement.",
            "verdict",
        )
        self.config = gauge(
            "specwatch_recommended_config_info",
            "What to do with --speculative-config (value always 1): action apply = paste config (complete), merge = merge config's keys into yours (drafter's model path unknown), remove_speculative_config, no_change, measure = undecided, run the measurement in the status JSON (config: the --speculative-config to restart with when it is a shorter K, else the measurement's kind, spec_off_canary or near_breakeven).",
            "config",
            "action",
        )
        self.mismatch = gauge(
            "specwatch_speculative_config_mismatch",
            "1 when the observed draft length is not what the stated draft.config (its num_speculative_tokens_per_batch_size schedule) gives at the live batch, else 0; absent without draft.config or enough drafts."
            + note,
        )
        self.configured_k = gauge(
            "specwatch_configured_draft_length",
            "Draft length K the stated draft.config gives at the live batch size." + note,
        )
        self.basis = gauge(
            "specwatch_acceptance_basis_info",
            "1 for a window whose acceptance rate, acceptance length and draft length are not ratios of its counters: basis engine_gauge_mean = the mean of the engine's own gauge estimate over the window's active polls (an engine exporting only gauges, docs/engines.md)."
            + note,
            "basis",
        )

    def add(self, wlabels: list[str], evaluation: RouteEvaluation) -> None:
        for name, field, _ in DERIVED_GAUGES:
            value = evaluation.value(field)
            if value is not None and math.isfinite(value):
                if field == "breakeven_acceptance_rate":
                    # Above 1 only says "cannot pay" (60.6 was seen): its own series says so.
                    self.cannot_pay.add_metric(wlabels, 1 if value >= 1.0 else 0)
                    value = min(value, 1.0)
                self.gauges[name].add_metric(wlabels, value)
        rates = evaluation.position_rates  # a guarded stat
        if rates:
            for position, value in enumerate(rates):
                self.position_rate.add_metric(wlabels + [str(position)], value)
        if evaluation.stats.drafts is not None:
            self.window_drafts.add_metric(wlabels, evaluation.stats.drafts)
        if evaluation.stats.acceptance_basis != COUNTER_RATIO and evaluation.acceptance_rate is not None:
            self.basis.add_metric(wlabels + [evaluation.stats.acceptance_basis], 1)
        if evaluation.verdict is not None:
            for name in VERDICTS:
                self.verdict.add_metric(wlabels + [name], 1 if name == evaluation.verdict else 0)
        if evaluation.config_check is not None:
            self.mismatch.add_metric(wlabels, 1 if evaluation.config_check.mismatch else 0)
            self.configured_k.add_metric(wlabels, evaluation.config_check.configured_k)
        advice = evaluation.advice if evaluation.guard_passed else None
        if advice is not None and advice.action is not None:
            self.config.add_metric(wlabels + list(config_label(advice, evaluation.stats.engine)), 1)

    def families(self) -> tuple[Metric, ...]:
        return (
            *self.gauges.values(),
            self.cannot_pay,
            self.position_rate,
            self.window_drafts,
            self.verdict,
            self.config,
            self.mismatch,
            self.configured_k,
            # Only where some window has another basis: vLLM's payload keeps its families as they were.
            *((self.basis,) if self.basis.samples else ()),
        )


class SpecwatchCollector(Collector):
    def __init__(self, get_state: Callable[[], State]):
        self._get_state = get_state

    def describe(self) -> Iterable[Metric]:
        return []  # families depend on what vLLM exports; nothing to pre-register

    def collect(self) -> Iterable[Metric]:
        state = self._get_state()
        yield from self._info()
        yield from self._cost_model(state)
        yield from self._health(state)
        yield from self._routes(state)

    def _info(self) -> Iterable[Metric]:
        build = GaugeMetricFamily("specwatch_build_info", "specwatch build information.", labels=["version"])
        build.add_metric([__version__], 1)
        yield build

    def _cost_model(self, state: State) -> Iterable[Metric]:
        """What the verdicts rest on, and how well the learned step-time curve fits (docs/costmodel.md)."""
        info = GaugeMetricFamily(
            "specwatch_cost_model_info",
            "What the verdicts rest on: source default (nothing configured), preset, profile or learned (the step-time curve fitted from vLLM's own metrics), with the hardware, model, dtype, tensor parallel size and draft method assumed; baseline history when the learned curve has measured spec-off step times of the route (before speculation was switched on, or after it was off), none when its split between target and speculation cost is the prior's.",
            labels=["source", "hardware", "model", "dtype", "tp", "method", "baseline"],
        )
        cm = state.cost_model
        if cm is not None:
            info.add_metric(
                [cm.source, cm.hardware, cm.model, cm.dtype, str(cm.tensor_parallel), cm.method, cm.baseline], 1
            )
        points, residual, predicted, observed = (
            GaugeMetricFamily(name, text, labels=ROUTE_LABELS) for name, text in FIT_GAUGES
        )
        down = {t.name for t in state.targets if t.up is False}
        for route in state.routes:
            fit = route.fit
            if fit is None or route.target in down or not route.current:
                continue
            labels = [route.route, route.target]
            points.add_metric(labels, fit.points)
            for family, value in (
                (residual, fit.residual_ratio),
                (predicted, fit.predicted_seconds),
                (observed, fit.observed_seconds),
            ):
                if value is not None and math.isfinite(value):
                    family.add_metric(labels, value)
        curve = GaugeMetricFamily(*CURVE_GAUGE, labels=[*ROUTE_LABELS, "tokens"])
        for route in state.routes:
            if route.target not in down and route.current:
                for tokens, seconds in route.curve_knots:
                    curve.add_metric([route.route, route.target, f"{tokens:.6g}"], seconds)
        yield from (info, points, residual, predicted, observed, curve)

    def _health(self, state: State) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "specwatch_target_up",
            "1 if the last poll of the vLLM target succeeded and parsed, else 0.",
            labels=["target"],
        )
        duration = GaugeMetricFamily(
            "specwatch_scrape_duration_seconds", "Duration of the last poll of the target.", labels=["target"]
        )
        errors = CounterMetricFamily(
            "specwatch_scrape_errors",
            "Failed polls of the target by reason (timeout, connect, tls, http_status, too_large, parse, invalid, "
            "engine_mismatch: the payload is another engine than the target's pinned engine).",
            labels=["target", "reason"],
        )
        dropped = CounterMetricFamily(
            "specwatch_payload_dropped",
            "Routes and engines the target's payloads carried past specwatch's bounds, dropped, summed over polls "
            "(limit: routes = routes per target, engines = engines per route).",
            labels=["target", "limit"],
        )
        resets = CounterMetricFamily(
            "specwatch_target_restarts",
            "Polls in which the target's counters were seen to restart (value drop or new _created), i.e. vLLM restarts.",
            labels=["target"],
        )
        dips = CounterMetricFamily(
            "specwatch_target_dips",
            "Polls in which a counter of the target read below its highest value without a restart (same _created, or a drop within noise without _created): clamped, not a restart.",
            labels=["target"],
        )
        last = GaugeMetricFamily(
            "specwatch_last_scrape_success_timestamp_seconds",
            "Unix time of the last successful poll of the target.",
            labels=["target"],
        )
        for target in state.targets:
            if target.up is not None:
                up.add_metric([target.name], 1.0 if target.up else 0.0)
            if target.scrape_duration is not None:
                duration.add_metric([target.name], target.scrape_duration)
            for reason, count in sorted(target.errors.items()):
                errors.add_metric([target.name, reason], count)
            for limit, count in sorted(target.dropped.items()):
                dropped.add_metric([target.name, limit], count)
            resets.add_metric([target.name], target.resets)
            dips.add_metric([target.name], target.dips)
            if target.last_success is not None:
                last.add_metric([target.name], target.last_success)
        yield from (up, duration, errors, dropped, resets, dips, last)

    def _routes(self, state: State) -> Iterable[Metric]:
        name, text, labels = ROUTE_INFO
        info = GaugeMetricFamily(name, text, labels=labels)
        expects, baseline = (GaugeMetricFamily(name, text, labels=ROUTE_LABELS) for name, text in ROUTE_GAUGES)
        counters = {
            kind: CounterMetricFamily(name, text + MIRRORED_NOTE + CACHE_NOTE, labels=ROUTE_LABELS)
            for kind, name, text in MIRRORED_COUNTERS
        }
        by_position = CounterMetricFamily(
            "specwatch_accepted_tokens_by_position",
            "Drafts whose token at this position was accepted, mirrored monotonic across vLLM restarts." + CACHE_NOTE,
            labels=["route", "target", "position"],
        )
        itl = HistogramMetricFamily(
            "specwatch_itl_seconds",
            "vLLM's per-step inter-token latency histogram (its buckets), mirrored monotonic across vLLM restarts."
            + CACHE_NOTE,
            labels=["route", "target"],
        )
        per_window = WindowFamilies(["route", "target", "window"], CACHE_NOTE)
        predicted_gain, measured_gain = (
            GaugeMetricFamily(name, text, labels=ROUTE_LABELS) for name, text in GRADING_GAUGES
        )
        before_window = GaugeMetricFamily(*BEFORE_WINDOW_GAUGE, labels=[*ROUTE_LABELS, "method", "quantity"])
        before_positions = GaugeMetricFamily(*BEFORE_POSITIONS_GAUGE, labels=[*ROUTE_LABELS, "position"])
        # While a target is down its values are not served from the last good polls: absent, never
        # stale (docs/architecture.md §4). The windows and verdicts are kept inside and
        # come back unchanged with the next good poll.
        down = {t.name for t in state.targets if t.up is False}
        for name, target, expected in state.unmatched_routes:
            expects.add_metric([name, target], 1 if expected else 0)
        for route in state.routes:
            labels = [route.route, route.target]
            info.add_metric([route.route, route.target, route.model_name, route.method, route.schema, route.engine], 1)
            expects.add_metric(labels, 1 if route.expects_speculation else 0)
            if route.baseline_itl_p99_seconds is not None:
                baseline.add_metric(labels, route.baseline_itl_p99_seconds)
            if route.target in down or not route.current:
                continue
            _add_mirrored(route, labels, counters, by_position)
            if route.itl_buckets:
                itl.add_metric(labels, [(_fmt_le(b), v) for b, v in route.itl_buckets], route.itl_sum)
            add_grading(route.grading, labels, predicted_gain, measured_gain)
            before = route.before_window
            if before is not None:
                for quantity, value in before.quantities().items():
                    before_window.add_metric([*labels, before.method, quantity], value)
                for position, rate in enumerate(before.position_rates or ()):
                    before_positions.add_metric([*labels, str(position)], rate)
            for evaluation in route.evaluations:
                per_window.add(labels + [evaluation.stats.window], evaluation)
        yield from (
            info,
            expects,
            baseline,
            *counters.values(),
            by_position,
            itl,
            *per_window.families(),
            predicted_gain,
            measured_gain,
            before_window,
            before_positions,
        )


def add_grading(
    grading: Grading | None, labels: list[str], predicted: GaugeMetricFamily, measured: GaugeMetricFamily
) -> None:
    """The predicted and measured gain of the latest graded change (sidecar and fleet mode)."""
    if grading is not None and grading.predicted_gain_ratio is not None:
        predicted.add_metric(labels, grading.predicted_gain_ratio)
    if grading is not None and grading.measured_gain_ratio is not None:
        measured.add_metric(labels, grading.measured_gain_ratio)


def _add_mirrored(
    route: RouteState,
    labels: list[str],
    counters: Mapping[Counter, CounterMetricFamily],
    by_position: CounterMetricFamily,
) -> None:
    """The route's mirrored counters: only those its engine counts (one it does not export is absent,
    not 0); the spec-decode ones only when the route runs speculation."""
    kinds = (
        (Counter.DRAFTS, Counter.DRAFT_TOKENS, Counter.ACCEPTED, Counter.GEN) if route.spec_present else (Counter.GEN,)
    )
    for kind in kinds:
        if kind in route.mirrored:
            counters[kind].add_metric(labels, route.mirrored[kind])
    if route.spec_present:
        for position, value in route.positions:
            by_position.add_metric(labels + [str(position)], value)


def registry_for(get_state: Callable[[], State]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecwatchCollector(get_state))
    return registry
