"""prometheus_client custom Collector: the metric contract (docs/architecture.md §4), from one State.

Families are built fresh from an immutable State on every collect(), so a route or engine that
disappears simply stops being exported (no stale children to remove), and collect() can never
fail on target data. Values that cannot be computed are omitted, never exported as 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from . import __version__
from .decide import VERDICTS
from .pipeline import State
from .vllm import K_ACCEPTED, K_DRAFT_TOKENS, K_DRAFTS, K_GEN

CACHE_NOTE = " Computed by specwatch from its own polls of vLLM (cached between polls)."

# (metric name, RouteEvaluation value name, help)
DERIVED_GAUGES = (
    ("specwatch_acceptance_rate", "acceptance_rate", "Accepted / proposed draft tokens over the window (alpha)."),
    ("specwatch_mean_acceptance_length", "mean_acceptance_length", "Tokens emitted per speculative step over the window, bonus token included (tau)."),
    ("specwatch_draft_length", "draft_length", "Mean proposed draft length K over the window (draft tokens / drafts)."),
    ("specwatch_batch_size", "batch_size", "Live batch size per engine over the window (requests decoded per engine step)."),
    ("specwatch_itl_p50_seconds", "itl_p50_seconds", "P50 of vLLM's per-step inter-token latency over the window (histogram_quantile semantics)."),
    ("specwatch_itl_p99_seconds", "itl_p99_seconds", "P99 of vLLM's per-step inter-token latency over the window (histogram_quantile semantics)."),
    ("specwatch_itl_per_token_mean_seconds", "itl_per_token_mean_seconds", "Mean inter-token latency per generated token over the window (ITL sum / generation tokens)."),
    ("specwatch_breakeven_acceptance_rate", "breakeven_acceptance_rate", "Acceptance rate at which speculation exactly pays at the live batch size and K (cost model)."),
    ("specwatch_acceptance_margin", "acceptance_margin", "Acceptance rate minus the break-even acceptance rate."),
    ("specwatch_expected_speedup", "expected_speedup", "Expected decode speedup of speculation at the live batch size (cost model; 1 = break-even)."),
    ("specwatch_recommended_draft_length", "recommended_draft_length", "Draft length that maximises expected speedup at the live batch size (0 = disable speculation)."),
    ("specwatch_max_speculative_batch_size", "max_speculative_batch_size", "Largest batch size at which the current acceptance rate still pays."),
)


def _fmt_le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class SpecwatchCollector(Collector):
    def __init__(self, get_state: Callable[[], State]):
        self._get_state = get_state

    def describe(self) -> Iterable[Metric]:
        return []  # families depend on what vLLM exports; nothing to pre-register

    def collect(self) -> Iterable[Metric]:
        state = self._get_state()
        yield from self._info()
        yield from self._health(state)
        yield from self._routes(state)

    def _info(self) -> Iterable[Metric]:
        build = GaugeMetricFamily("specwatch_build_info", "specwatch build information.", labels=["version"])
        build.add_metric([__version__], 1)
        yield build

    def _health(self, state: State) -> Iterable[Metric]:
        up = GaugeMetricFamily("specwatch_target_up", "1 if the last poll of the vLLM target succeeded and parsed, else 0.", labels=["target"])
        duration = GaugeMetricFamily("specwatch_scrape_duration_seconds", "Duration of the last poll of the target.", labels=["target"])
        errors = CounterMetricFamily("specwatch_scrape_errors", "Failed polls of the target by reason (timeout, connect, http_status, too_large, parse, invalid).", labels=["target", "reason"])
        resets = CounterMetricFamily("specwatch_target_restarts", "Polls in which the target's counters were seen to restart (value drop or new _created), i.e. vLLM restarts.", labels=["target"])
        last = GaugeMetricFamily("specwatch_last_scrape_success_timestamp_seconds", "Unix time of the last successful poll of the target.", labels=["target"])
        for target in state.targets:
            if target.up is not None:
                up.add_metric([target.name], 1.0 if target.up else 0.0)
            if target.scrape_duration is not None:
                duration.add_metric([target.name], target.scrape_duration)
            for reason, count in sorted(target.errors.items()):
                errors.add_metric([target.name, reason], count)
            resets.add_metric([target.name], target.resets)
            if target.last_success is not None:
                last.add_metric([target.name], target.last_success)
        yield from (up, duration, errors, resets, last)

    def _routes(self, state: State) -> Iterable[Metric]:
        info = GaugeMetricFamily("specwatch_route_info", "Route metadata: model, speculative method as configured, and the vLLM metric schema spoken.",
                                 labels=["route", "target", "model_name", "method", "schema"])
        expects = GaugeMetricFamily("specwatch_route_expects_speculation", "1 if the route is configured to run speculative decoding.", labels=["route", "target"])
        baseline = GaugeMetricFamily("specwatch_baseline_itl_p99_seconds", "Configured spec-off P99 ITL baseline of the route.", labels=["route", "target"])
        counters = {
            K_DRAFTS: CounterMetricFamily("specwatch_drafts", "vLLM speculative drafts, mirrored monotonic across vLLM restarts." + CACHE_NOTE, labels=["route", "target"]),
            K_DRAFT_TOKENS: CounterMetricFamily("specwatch_draft_tokens", "Proposed draft tokens, mirrored monotonic across vLLM restarts." + CACHE_NOTE, labels=["route", "target"]),
            K_ACCEPTED: CounterMetricFamily("specwatch_accepted_tokens", "Accepted draft tokens, mirrored monotonic across vLLM restarts." + CACHE_NOTE, labels=["route", "target"]),
            K_GEN: CounterMetricFamily("specwatch_generation_tokens", "Generated output tokens, mirrored monotonic across vLLM restarts." + CACHE_NOTE, labels=["route", "target"]),
        }
        by_position = CounterMetricFamily("specwatch_accepted_tokens_by_position", "Drafts whose token at this position was accepted, mirrored monotonic across vLLM restarts." + CACHE_NOTE,
                                          labels=["route", "target", "position"])
        itl = HistogramMetricFamily("specwatch_itl_seconds", "vLLM's per-step inter-token latency histogram (its buckets), mirrored monotonic across vLLM restarts." + CACHE_NOTE,
                                    labels=["route", "target"])
        gauges = {name: GaugeMetricFamily(name, text + CACHE_NOTE, labels=["route", "target", "window"]) for name, _, text in DERIVED_GAUGES}
        position_rate = GaugeMetricFamily("specwatch_position_acceptance_rate", "Share of drafts whose token at this position was accepted, over the window (p_i)." + CACHE_NOTE,
                                          labels=["route", "target", "window", "position"])
        window_drafts = GaugeMetricFamily("specwatch_window_drafts", "Speculative drafts in the window (the sample behind the ratios)." + CACHE_NOTE, labels=["route", "target", "window"])
        verdict = GaugeMetricFamily("specwatch_verdict", "1 for the route's current verdict (spec_off, insufficient_data, keep, shorten, disable), 0 for the others.",
                                    labels=["route", "target", "window", "verdict"])
        config = GaugeMetricFamily("specwatch_recommended_config_info", "The recommended --speculative-config JSON for the route (value always 1).",
                                   labels=["route", "target", "window", "config"])
        # While a target is down its values are not served from the last good polls: absent, never
        # stale (docs/architecture.md §4). The windows and verdicts are kept inside and
        # come back unchanged with the next good poll.
        down = {t.name for t in state.targets if t.up is False}
        for name, target, expected in state.unmatched_routes:
            expects.add_metric([name, target], 1 if expected else 0)
        for route in state.routes:
            labels = [route.route, route.target]
            info.add_metric([route.route, route.target, route.model_name, route.method, route.schema], 1)
            expects.add_metric(labels, 1 if route.expects_speculation else 0)
            if route.baseline_itl_p99_seconds is not None:
                baseline.add_metric(labels, route.baseline_itl_p99_seconds)
            if route.target in down or not route.current:
                continue
            if route.spec_present:
                for kind in (K_DRAFTS, K_DRAFT_TOKENS, K_ACCEPTED):
                    counters[kind].add_metric(labels, route.mirrored[kind])
                for position, value in route.positions:
                    by_position.add_metric(labels + [str(position)], value)
            counters[K_GEN].add_metric(labels, route.mirrored[K_GEN])
            if route.itl_buckets:
                itl.add_metric(labels, [(_fmt_le(b), v) for b, v in route.itl_buckets], route.itl_sum)
            for evaluation in route.evaluations:
                wlabels = labels + [evaluation.stats.window]
                for name, field, _ in DERIVED_GAUGES:
                    derived = evaluation.value(field)
                    if derived is not None and math.isfinite(derived):
                        gauges[name].add_metric(wlabels, derived)
                # value() is annotated float | None but returns the stats' tuple for this field
                rates = cast("tuple[float, ...] | None", evaluation.value("position_rates"))
                if rates:
                    for position, value in enumerate(rates):
                        position_rate.add_metric(wlabels + [str(position)], value)
                if evaluation.stats.drafts is not None:
                    window_drafts.add_metric(wlabels, evaluation.stats.drafts)
                if evaluation.verdict is not None:
                    for name in VERDICTS:
                        verdict.add_metric(wlabels + [name], 1 if name == evaluation.verdict else 0)
                recommended = evaluation.value("recommended_config")
                if recommended:
                    config.add_metric(wlabels + [json.dumps(recommended, separators=(",", ":"), sort_keys=True)], 1)
        yield from (info, expects, baseline, *counters.values(), by_position, itl, *gauges.values(),
                    position_rate, window_drafts, verdict, config)


def registry_for(get_state: Callable[[], State]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecwatchCollector(get_state))
    return registry
